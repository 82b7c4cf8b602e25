package export

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/internal/jsonfast"
	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/dataset"
)

// NemoGymRow is one rollout as NeMo Gym's ng_collect_rollouts writes it: a JSON object (its
// members in Line). In Parquet it is the line as text.
type NemoGymRow struct {
	Line JSONText `parquet:"line" json:"-"`
}

// MarshalJSON writes the line itself.
func (n NemoGymRow) MarshalJSON() ([]byte, error) { return n.Line.MarshalJSON() }

// nemoGymResponseDefaults are the members of a Responses API object that NeMo Gym's rollout
// files have and rollout's /verify response leaves out, with the values a response that
// did not set them has.
var nemoGymResponseDefaults = map[string]json.RawMessage{
	"background":           json.RawMessage(`false`),
	"max_tool_calls":       json.RawMessage(`null`),
	"metadata":             json.RawMessage(`{}`),
	"previous_response_id": json.RawMessage(`null`),
	"prompt":               json.RawMessage(`null`),
	"prompt_cache_key":     json.RawMessage(`null`),
	"reasoning":            json.RawMessage(`{"effort":null,"generate_summary":null,"summary":null}`),
	"safety_identifier":    json.RawMessage(`null`),
	"service_tier":         json.RawMessage(`null`),
	"store":                json.RawMessage(`false`),
	"text":                 json.RawMessage(`{"format":{"type":"text"}}`),
	"top_logprobs":         json.RawMessage(`0`),
	"truncation":           json.RawMessage(`"disabled"`),
	"user":                 json.RawMessage(`null`),
}

// nemoGymRow rebuilds the rollout's verify request from its trajectory, as /verify got it, and
// adds the reward and components as NeMo Gym's verify answer does.
func (e *exporter) nemoGymRow(ro *rollout) (*NemoGymRow, string, error) {
	r, p := ro.rec, ro.task.Params
	tr := ro.traj
	at := &agent.Trajectory{Usage: tr.Usage, Termination: tr.Termination}
	// The rounds' texts and tool calls are the assistant messages after the prompt, in order;
	// tool outputs are the tool messages that answer them.
	outputs := map[string]string{}
	for i := range tr.Messages {
		if m := &tr.Messages[i]; m.Role == openai.ChatMessageRoleTool {
			outputs[m.ToolCallID] = m.text()
		}
	}
	var answers []*storedMessage
	for i := min(len(agent.ChatMessages(p)), len(tr.Messages)); i < len(tr.Messages); i++ {
		if m := &tr.Messages[i]; m.Role == openai.ChatMessageRoleAssistant {
			answers = append(answers, m)
		}
	}
	if len(answers) == 0 {
		return nil, DropNoAnswer, nil
	}
	for i, m := range answers {
		rd := agent.Round{Index: i, Content: m.text(), Reasoning: m.ReasoningContent}
		if i < len(tr.Rounds) {
			rd.FinishReason, rd.Usage = tr.Rounds[i].FinishReason, tr.Rounds[i].Usage
			if tr.Rounds[i].Reasoning != "" {
				rd.Reasoning = tr.Rounds[i].Reasoning // the round's own (runs before the messages kept it)
			}
		}
		for _, tc := range m.ToolCalls {
			rd.ToolCalls = append(rd.ToolCalls, agent.ToolCall{CallID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments, Output: outputs[tc.ID]})
		}
		at.Rounds = append(at.Rounds, rd)
	}
	id := fmt.Sprintf("resp_%s_%d_%d", strings.ReplaceAll(taskName(r), " ", "_"), r.RolloutIndex, r.TaskIndex)
	created := 0.0
	if !r.StartedAt.IsZero() {
		created = float64(r.StartedAt.UnixMilli()) / 1000
	}
	resp := agent.BuildResponse(id, created, r.Model, p, at)
	b, err := json.Marshal(resp)
	if err != nil {
		return nil, "", err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, "", err
	}
	for k, v := range nemoGymResponseDefaults {
		if _, ok := obj[k]; !ok {
			obj[k] = v
		}
	}
	out, err := nemoGymOutput(resp, at.Rounds, tr.Rounds)
	if err != nil {
		return nil, "", err
	}
	obj["output"] = out

	var line bytes.Buffer
	line.WriteString(`{"responses_create_params":`)
	line.Write(p.Raw)
	line.WriteString(`,"response":`)
	if err := writeObject(&line, obj); err != nil {
		return nil, "", err
	}
	var answer map[string]json.RawMessage
	if ro.verify != nil {
		// The verify answer as the server gave it (--jsonl-out kept it): its members but the
		// request's echo and rollout's keys.
		if err := json.Unmarshal(ro.verify, &answer); err != nil {
			return nil, "", fmt.Errorf("task %d rollout %d: NeMo Gym line: %v", r.TaskIndex, r.RolloutIndex, err)
		}
		for k := range answer {
			if k == "response" || k == "responses_create_params" || k == "agent_ref" || strings.HasPrefix(k, "_ng_") {
				delete(answer, k)
			}
		}
	}
	if _, ok := answer["reward"]; ok {
		line.WriteByte(',')
		if err := writeMembers(&line, answer); err != nil {
			return nil, "", err
		}
	} else {
		// The record's reward and numeric components.
		line.WriteString(`,"reward":`)
		v, _ := jsonfast.AppendFloat(nil, r.Reward)
		line.Write(v)
		names := make([]string, 0, len(r.RewardComponents))
		for k := range r.RewardComponents {
			if k != "reward" && k != "response" && k != "responses_create_params" && !strings.HasPrefix(k, "_ng_") {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		for _, k := range names {
			line.WriteByte(',')
			line.Write(jsonfast.AppendString(nil, k))
			line.WriteByte(':')
			v, _ := jsonfast.AppendFloat(nil, r.RewardComponents[k])
			line.Write(v)
		}
	}
	// NeMo Gym keys a rollout by (_ng_task_index, _ng_rollout_index) and aggregates by
	// agent_ref.name: with several arms, each arm's repeats get their own rollout indexes
	// (arm index × repeats + repeat) and the agent's name says the arm.
	rolloutIndex, agent := r.RolloutIndex, e.agentRef(ro)
	if len(e.arms) > 1 {
		rolloutIndex = int64(e.arms[r.Arm])*(e.maxRepeat+1) + r.RolloutIndex
	}
	agentJSON, err := json.Marshal(agent)
	if err != nil {
		return nil, "", err
	}
	fmt.Fprintf(&line, `,"agent_ref":%s,"_ng_task_index":%d,"_ng_rollout_index":%d,"_rollout_repeat":%d,"_ng_arm":`, agentJSON, r.TaskIndex, rolloutIndex, r.RolloutIndex)
	line.Write(jsonfast.AppendString(nil, r.Arm))
	line.WriteByte('}')
	return &NemoGymRow{Line: JSONText(line.String())}, "", nil
}

// agentRef is the line's agent_ref: the task row's (type responses_api_agents when it names
// none), its name the arm when the row has none, and the arm after an "@" when the export has
// several arms, so that NeMo Gym's per-agent metrics keep the arms apart.
func (e *exporter) agentRef(ro *rollout) dataset.AgentRef {
	ref := dataset.AgentRef{Type: "responses_api_agents", Name: ro.rec.Arm}
	if a := ro.task.AgentRef; a != nil && a.Name != "" {
		ref.Name = a.Name
		if a.Type != "" {
			ref.Type = a.Type
		}
		if len(e.arms) > 1 {
			ref.Name += "@" + ro.rec.Arm
		}
	}
	return ref
}

// nemoGymOutput is the response's output items as NeMo Gym writes them: every member its
// item types have (a function_call_output's id and status are null, an output_text has
// logprobs), and each model call's tokens on the last item it produced.
func nemoGymOutput(resp *agent.Response, at []agent.Round, rounds []storedRound) (json.RawMessage, error) {
	items := make([]map[string]any, len(resp.Output))
	for i, it := range resp.Output {
		m := map[string]any{"type": it.Type}
		switch it.Type {
		case "message":
			content := make([]map[string]any, len(it.Content))
			for j, c := range it.Content {
				content[j] = map[string]any{"type": c.Type, "text": c.Text, "annotations": []any{}, "logprobs": []any{}}
			}
			m["id"], m["role"], m["status"], m["content"] = it.ID, it.Role, it.Status, content
		case "function_call":
			m["id"], m["status"], m["call_id"], m["name"], m["arguments"] = it.ID, it.Status, it.CallID, it.Name, deref(it.Arguments)
		case "function_call_output":
			m["id"], m["status"], m["call_id"], m["output"] = nil, nil, it.CallID, deref(it.Output)
		case "reasoning":
			m["id"], m["summary"] = it.ID, it.Summary
		}
		items[i] = m
	}
	// The items of each round, as BuildResponse writes them: its reasoning, its message (text,
	// or no tool calls), its function calls, then their outputs. The last of the first three
	// kinds is the model call's last item.
	last := make([]int, len(at))
	pos := 0
	for r := range at {
		rd := &at[r]
		if rd.Reasoning != "" {
			pos++
		}
		if rd.Content != "" || len(rd.ToolCalls) == 0 {
			pos++
		}
		pos += len(rd.ToolCalls)
		last[r] = pos - 1
		pos += len(rd.ToolCalls)
	}
	if pos != len(items) {
		return nil, fmt.Errorf("response has %d output items, its rounds %d", len(items), pos)
	}
	for r, i := range last {
		if r < len(rounds) && rounds[r].GenerationTokenIDs != nil {
			rd := &rounds[r]
			items[i]["prompt_token_ids"] = nonNil(rd.PromptTokenIDs)
			items[i]["generation_token_ids"] = rd.GenerationTokenIDs
			items[i]["generation_log_probs"] = rd.GenerationLogProbs
		}
	}
	return jsonfast.Marshal(items)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// writeObject writes obj with its keys in order.
func writeObject(b *bytes.Buffer, obj map[string]json.RawMessage) error {
	b.WriteByte('{')
	if err := writeMembers(b, obj); err != nil {
		return err
	}
	b.WriteByte('}')
	return nil
}

// writeMembers writes obj's members, keys in order, without the braces.
func writeMembers(b *bytes.Buffer, obj map[string]json.RawMessage) error {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(jsonfast.AppendString(nil, k))
		b.WriteByte(':')
		if err := json.Compact(b, obj[k]); err != nil {
			return err
		}
	}
	return nil
}
