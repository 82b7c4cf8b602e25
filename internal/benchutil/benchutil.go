// Package benchutil is what the Go benchmarks of several packages share: the CPU time of the
// process, steadier than wall time on a shared machine, and the counter task that the load
// benchmark runs (bench/loadbench), as fixed bytes for the benchmarks of one piece of it.
package benchutil

// CounterTools is the counter task's tools, which the runner's response repeats.
const CounterTools = `[{"type":"function","name":"increment_counter","description":"Add count to the session's counter; returns the new value.","parameters":{"type":"object","properties":{"count":{"type":"integer","description":"How much to add."}},"required":["count"],"additionalProperties":false},"strict":true},` +
	`{"type":"function","name":"get_counter_value","description":"The counter's value.","parameters":{"type":"object","properties":{},"additionalProperties":false},"strict":true}]`

// CounterRow is a counter task row as the load benchmark writes it (3 rounds: 2
// increment_counter calls, then the answer), about 1 KB.
const CounterRow = `{"id":4711,"responses_create_params":{"input":[{"role":"user","content":"The counter starts at 0. Increment it by 1, one call per round, 2 times; then say its value."}],` +
	`"tools":` + CounterTools + `,"parallel_tool_calls":false},"agent_ref":{"type":"responses_api_agents","name":"counter"},"initial_count":0,"expected_count":2,` +
	`"reference_plan":{"rounds":[[{"name":"increment_counter","arguments":{"count":1}}],[{"name":"increment_counter","arguments":{"count":1}}]],"final":"The counter is at 2."}}`

// CounterResponse is the Responses API object of that 3-round rollout, as agent.BuildResponse
// writes it: two function_call / function_call_output pairs and the final message.
const CounterResponse = `{"id":"resp_4711_0_multi","created_at":1767225600,"model":"sim","object":"response","output":[` +
	`{"type":"function_call","id":"fc_4711_0_multi_1","status":"completed","call_id":"call_0_0","name":"increment_counter","arguments":"{\"count\":1}"},` +
	`{"type":"function_call_output","call_id":"call_0_0","output":"{\"success\": true, \"count\": 1}"},` +
	`{"type":"function_call","id":"fc_4711_0_multi_2","status":"completed","call_id":"call_1_0","name":"increment_counter","arguments":"{\"count\":1}"},` +
	`{"type":"function_call_output","call_id":"call_1_0","output":"{\"success\": true, \"count\": 2}"},` +
	`{"type":"message","id":"msg_4711_0_multi_3","status":"completed","role":"assistant","content":[{"type":"output_text","text":"The counter is at 2.","annotations":[]}]}],` +
	`"parallel_tool_calls":false,"tool_choice":"auto","tools":` + CounterTools + `,"status":"completed","error":null,"incomplete_details":null,"instructions":null,` +
	`"temperature":null,"top_p":null,"max_output_tokens":null,"usage":{"input_tokens":412,"input_tokens_details":{"cached_tokens":0},"output_tokens":57,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":469}}`
