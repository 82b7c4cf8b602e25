package interop_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// proxyCall is one Chat Completions request that the recording proxy passed to llama-server,
// and what the server answered.
type proxyCall struct {
	tools              bool     // the request offered tools
	sent               []string // tool call ids in the request's messages
	got                []string // tool call ids in the server's answer
	status             int
	prompt, completion int    // the server's usage
	body, answer       []byte // the request and the answer as they were
}

// recorder is a loopback proxy in front of llama-server that keeps every call.
type recorder struct {
	url   string // its OpenAI-compatible base URL
	mu    sync.Mutex
	calls []proxyCall
}

// recordingProxy starts a proxy to upstream (http://HOST:PORT), closed when the test ends.
func recordingProxy(t *testing.T, upstream string) *recorder {
	t.Helper()
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, upstream+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		for _, h := range []string{"Content-Type", "Authorization"} {
			req.Header[h] = r.Header[h]
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		answer, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if r.URL.Path == "/v1/chat/completions" {
			rec.add(body, resp.StatusCode, answer)
		}
		for k, v := range resp.Header {
			if k != "Content-Length" {
				w.Header()[k] = v
			}
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(answer)
	}))
	t.Cleanup(srv.Close)
	rec.url = srv.URL + "/v1"
	return rec
}

// toolCallIDs is the part of a request or an answer that names tool calls.
type toolCallIDs []struct {
	ID string `json:"id"`
}

func (rec *recorder) add(body []byte, status int, answer []byte) {
	var req struct {
		Tools    []json.RawMessage `json:"tools"`
		Messages []struct {
			ToolCallID string      `json:"tool_call_id"`
			ToolCalls  toolCallIDs `json:"tool_calls"`
		} `json:"messages"`
	}
	var resp struct {
		Choices []struct {
			Message struct {
				ToolCalls toolCallIDs `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	json.Unmarshal(body, &req)
	json.Unmarshal(answer, &resp)
	c := proxyCall{tools: len(req.Tools) > 0, status: status, prompt: resp.Usage.PromptTokens, completion: resp.Usage.CompletionTokens,
		body: body, answer: answer}
	for _, m := range req.Messages {
		if m.ToolCallID != "" {
			c.sent = append(c.sent, m.ToolCallID)
		}
		for _, tc := range m.ToolCalls {
			c.sent = append(c.sent, tc.ID)
		}
	}
	for _, ch := range resp.Choices {
		for _, tc := range ch.Message.ToolCalls {
			c.got = append(c.got, tc.ID)
		}
	}
	rec.mu.Lock()
	rec.calls = append(rec.calls, c)
	rec.mu.Unlock()
}

// journalRecord is the part of a journal.jsonl line (a rollouts.parquet row) the checks read.
type journalRecord struct {
	TaskIndex        int      `json:"task_index"`
	RolloutIndex     int      `json:"rollout_index"`
	Arm              string   `json:"arm"`
	TaskID           string   `json:"task_id"`
	Model            string   `json:"model"`
	Reward           float64  `json:"reward"`
	HasReward        bool     `json:"has_reward"`
	Rounds           int      `json:"rounds"`
	ToolCalls        int      `json:"tool_calls"`
	ToolNames        []string `json:"tool_names"`
	PromptTokens     int      `json:"prompt_tokens"`
	CompletionTokens int      `json:"completion_tokens"`
	Termination      string   `json:"termination"`
	FailureClass     string   `json:"failure_class"`
	Error            string   `json:"error"`
	Context          string   `json:"context"`
	ContextTokens    []int    `json:"context_tokens"`
	ContextTokensMax int      `json:"context_tokens_max"`
	BriefingCalls    int      `json:"briefing_calls"`
}

// armRollout keys a rollout of a run with arms.
type armRollout struct {
	arm        string
	task, roll int
}

// strategyRun is a run's records and trajectories, by arm and rollout.
type strategyRun struct {
	recs  map[armRollout]journalRecord
	trajs map[armRollout]record
}

// readStrategyRun reads out/journal.jsonl and out/trajectories.jsonl; want is the number of
// rollouts.
func readStrategyRun(t *testing.T, out string, want int) strategyRun {
	t.Helper()
	run := strategyRun{recs: map[armRollout]journalRecord{}, trajs: map[armRollout]record{}}
	for _, r := range readJSONL[journalRecord](t, filepath.Join(out, "journal.jsonl")) {
		run.recs[armRollout{r.Arm, r.TaskIndex, r.RolloutIndex}] = r
	}
	for _, r := range records(t, out) {
		run.trajs[armRollout{r.Arm, r.TaskIndex, r.RolloutIndex}] = r
	}
	if len(run.recs) != want || len(run.trajs) != want {
		t.Fatalf("%d records and %d trajectories, want %d", len(run.recs), len(run.trajs), want)
	}
	return run
}

func (k armRollout) String() string {
	return fmt.Sprintf("arm %s task %d rollout %d", k.arm, k.task, k.roll)
}

// The context strategies against llama-server, through a proxy that records every request and
// the server's answer. The model is toolcall.gguf: whatever it is shown, it calls
// get_counter_value, so every rollout runs to --max-rounds with one call a round, and the
// strategies' requests differ only in what they hold. It cannot write a briefing: with no
// tools offered it still answers its tool-call block (as text, or as a call that the briefing
// strategy ignores); the checks are on what is sent and counted, not on what it says, and the
// rewards mean nothing.
//
// One run with arms full, window:1, budget:150 and briefing over 3 NeMo Gym counter tasks:
// every record names its strategy; each round's context_tokens is the prompt_tokens of
// llama-server's own answer to that round's request (matched by the tool call id the server
// made up); where window or budget removed messages the server counted fewer prompt tokens
// than for full's request of the same round, and as many where nothing was removed; briefing
// made one call without tools after every round but the last, and the proxy saw exactly the
// rounds plus the briefing calls; the records' tokens add up to the server's /metrics; no
// rollout is an infrastructure failure.
//
// Then, on a server whose context (chosen from the first run's numbers) holds window:1's
// largest request but not full's late rounds: full ends as context_length with the server's
// refusal, scored, while window:1 and budget:1 (a budget smaller than the task: the task and
// the last round are still sent) finish; and a task longer than the context ends as
// context_length under every strategy, budget:1 included.
func TestContextStrategies(t *testing.T) {
	s := env(t)
	srv := s.start(t, "toolcall.gguf", "-c", "4096", "--parallel", "4")
	proxy := recordingProxy(t, srv.base)
	const nTasks, rounds = 3, 6
	arms := []string{"full", "window:1", "budget:150", "briefing"}
	tasks, _ := counterTasks(t, nTasks)
	out, _ := s.run(t, "--input", tasks, "--context", strings.Join(arms, ","), "--concurrency", "12", "--max-rounds", strconv.Itoa(rounds),
		"--model-url", proxy.url, "--model", "toolcall", "--server", counterServer, "--seed", "7")
	run := readStrategyRun(t, out, len(arms)*nTasks)

	// Each call the proxy saw belongs to the rollout whose tool call ids it sent or got.
	owner := map[string]armRollout{}
	for k, tr := range run.trajs {
		for _, rd := range tr.Trajectory.Rounds {
			for _, c := range rd.ToolCalls {
				if prev, dup := owner[c.CallID]; dup {
					t.Fatalf("tool call id %q in %s and %s: the server's ids cannot tell the rollouts apart", c.CallID, prev, k)
				}
				owner[c.CallID] = k
			}
		}
	}
	proxy.mu.Lock()
	calls := proxy.calls
	proxy.mu.Unlock()
	byRollout := map[armRollout][]proxyCall{}
	for i, c := range calls {
		if c.status != http.StatusOK {
			t.Fatalf("call %d: HTTP %d", i, c.status)
		}
		owners := map[armRollout]bool{}
		for _, id := range append(append([]string(nil), c.sent...), c.got...) {
			if k, ok := owner[id]; ok {
				owners[k] = true
			}
		}
		if len(owners) != 1 {
			t.Fatalf("call %d (ids sent %v, got %v) belongs to %d rollouts", i, c.sent, c.got, len(owners))
		}
		for k := range owners {
			byRollout[k] = append(byRollout[k], c)
		}
	}

	var prompt, completion, roundsAll, briefings int
	for k, rec := range run.recs {
		tr := run.trajs[k].Trajectory
		if rec.Context != k.arm || rec.FailureClass != "" || !rec.HasReward || rec.Termination != "max_rounds" ||
			rec.Rounds != rounds || len(tr.Rounds) != rounds || len(rec.ContextTokens) != rounds {
			t.Fatalf("%s: context %q class %q scored %v termination %q rounds %d, context_tokens %v (%s)",
				k, rec.Context, rec.FailureClass, rec.HasReward, rec.Termination, rec.Rounds, rec.ContextTokens, rec.Error)
		}
		if (tr.Context == nil) != (k.arm == "full") || tr.Context != nil && (tr.Context.Strategy != k.arm || len(tr.Context.Rounds) != rounds) {
			t.Fatalf("%s: trajectory's context trace %+v", k, tr.Context)
		}
		// context_tokens is what the server counted for each round's request.
		mine := byRollout[k]
		var withTools, without []proxyCall
		for _, c := range mine {
			if c.tools {
				withTools = append(withTools, c)
			} else {
				without = append(without, c)
			}
		}
		if len(withTools) != rounds {
			t.Fatalf("%s: the proxy saw %d requests with tools, want %d rounds", k, len(withTools), rounds)
		}
		for i, rd := range tr.Rounds {
			if len(rd.ToolCalls) != 1 || rd.ToolCalls[0].Status != http.StatusOK || len(withTools[i].got) != 1 || withTools[i].got[0] != rd.ToolCalls[0].CallID {
				t.Fatalf("%s round %d: calls %+v, the server's answer %v", k, i, rd.ToolCalls, withTools[i].got)
			}
			server := withTools[i].prompt
			if rec.ContextTokens[i] != server || rd.Usage.PromptTokens != server || tr.Context != nil && tr.Context.Rounds[i].PromptTokens != server {
				t.Fatalf("%s round %d: context_tokens %d, round usage %d; llama-server counted %d", k, i, rec.ContextTokens[i], rd.Usage.PromptTokens, server)
			}
			if rec.ContextTokensMax < server {
				t.Fatalf("%s: context_tokens_max %d < %d", k, rec.ContextTokensMax, server)
			}
		}
		// Briefing: one call without tools after each round that another follows.
		wantBriefings := 0
		if k.arm == "briefing" {
			wantBriefings = rounds - 1
			if len(tr.Context.Briefings) != wantBriefings {
				t.Fatalf("%s: %d briefings in the trajectory, want %d", k, len(tr.Context.Briefings), wantBriefings)
			}
			for j, b := range tr.Context.Briefings {
				if b.Round != j || b.Text == "" || b.Usage.PromptTokens != without[j].prompt || b.Usage.CompletionTokens != without[j].completion {
					t.Fatalf("%s: briefing %d %+v; llama-server counted %d prompt and %d completion tokens", k, j, b, without[j].prompt, without[j].completion)
				}
			}
		}
		if rec.BriefingCalls != wantBriefings || len(without) != wantBriefings {
			t.Fatalf("%s: briefing_calls %d, the proxy saw %d calls without tools; want %d", k, rec.BriefingCalls, len(without), wantBriefings)
		}
		// The record's tokens are all its calls', briefing calls included.
		var p, c int
		for _, call := range mine {
			p += call.prompt
			c += call.completion
		}
		if rec.PromptTokens != p || rec.CompletionTokens != c {
			t.Fatalf("%s: record's tokens %d prompt, %d completion; llama-server's answers %d, %d", k, rec.PromptTokens, rec.CompletionTokens, p, c)
		}
		prompt += rec.PromptTokens
		completion += rec.CompletionTokens
		roundsAll += rec.Rounds
		briefings += rec.BriefingCalls
	}
	if len(calls) != roundsAll+briefings {
		t.Fatalf("the proxy saw %d calls; the records count %d rounds and %d briefing calls", len(calls), roundsAll, briefings)
	}
	if m := srv.metrics(t); float64(completion) != m["tokens_predicted_total"] || float64(prompt) != m["prompt_tokens_total"]+m["prompt_tokens_cached_total"] {
		t.Fatalf("records: %d prompt, %d completion tokens; server: %v prompt processed + %v cached, %v predicted",
			prompt, completion, m["prompt_tokens_total"], m["prompt_tokens_cached_total"], m["tokens_predicted_total"])
	}
	if sum := summary(t, out); sum["failed"] != float64(0) || sum["scored"] != float64(len(run.recs)) {
		t.Fatalf("summary: %v failed, %v scored", sum["failed"], sum["scored"])
	}

	// Against full's request of the same round (same task, same seed), as the server counted.
	windowMax, completionMax := 0, 0
	for k, rec := range run.recs {
		full := run.recs[armRollout{"full", k.task, k.roll}].ContextTokens
		tr := run.trajs[k].Trajectory
		for _, rd := range tr.Rounds {
			completionMax = max(completionMax, rd.Usage.CompletionTokens)
		}
		switch k.arm {
		case "window:1", "budget:150":
			removed := 0
			for i, cr := range tr.Context.Rounds {
				got := rec.ContextTokens[i]
				if cr.RemovedMessages > 0 && got >= full[i] || cr.RemovedMessages == 0 && got != full[i] {
					t.Fatalf("%s round %d: %d prompt tokens with %d messages removed; full's request %d", k, i, got, cr.RemovedMessages, full[i])
				}
				if cr.RemovedMessages > 0 {
					removed++
				}
				// budget:150 is 600 bytes of messages: over it, only the task's message and the
				// last round (its assistant message and tool result) are left.
				if k.arm == "budget:150" && cr.Bytes > 150*4 && cr.Messages != 3 {
					t.Fatalf("%s round %d: %d messages, %d bytes sent over the budget", k, i, cr.Messages, cr.Bytes)
				}
			}
			if removed == 0 {
				t.Fatalf("%s: nothing removed in %d rounds (%v)", k, rounds, rec.ContextTokens)
			}
			if k.arm == "window:1" {
				windowMax = max(windowMax, rec.ContextTokensMax)
			}
		case "briefing":
			// Round 1 is shown the task, the briefing and round 0: more than full's.
			if rec.ContextTokens[0] != full[0] || rec.ContextTokens[1] <= full[1] {
				t.Fatalf("%s: %v prompt tokens; full's %v", k, rec.ContextTokens, full)
			}
		}
	}
	full0 := run.recs[armRollout{"full", 0, 0}].ContextTokens
	t.Logf("prompt tokens per round, task 0: full %v, window:1 %v, budget:150 %v, briefing %v",
		full0, run.recs[armRollout{"window:1", 0, 0}].ContextTokens, run.recs[armRollout{"budget:150", 0, 0}].ContextTokens,
		run.recs[armRollout{"briefing", 0, 0}].ContextTokens)

	// A context that holds window:1's requests and answers but not full's later rounds. The
	// server's context is a multiple of 256 tokens.
	// Each round adds the same tokens (the model's answers and the tool results are all alike),
	// and the context is chosen so that no request of full's fits with too little room left for
	// the answer: llama-server would cut that answer (finish_reason length) rather than refuse.
	step := full0[1] - full0[0]
	for i := range full0 {
		if full0[i] != full0[0]+i*step {
			t.Fatalf("full's prompt tokens %v do not grow by the same step each round", full0)
		}
	}
	ctxSize := (windowMax + completionMax + 1 + 255) / 256 * 256
	for r := (ctxSize - 1 - full0[0]) % step; r <= completionMax+1 || r == step-1; r = (ctxSize - 1 - full0[0]) % step {
		if ctxSize += 256; ctxSize > 8192 {
			t.Fatalf("no context size fits: step %d tokens, answers of %d", step, completionMax)
		}
	}
	overflowRounds := (ctxSize-full0[0])/step + 3 // full's request in the last round is over the context
	t.Logf("second server: -c %d; %d rounds", ctxSize, overflowRounds)
	small := s.start(t, "toolcall.gguf", "-c", strconv.Itoa(ctxSize), "--parallel", "1")
	oneTask, _ := counterTasks(t, 1)
	data, err := os.ReadFile(oneTask)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("count the apples and the pears again ", ctxSize/4)
	tasks = writeTasks(t, strings.TrimSpace(string(data)), `{"agent_ref":{"type":"responses_api_agents","name":"example_session_state_mgmt"},"responses_create_params":{"input":[{"role":"user","content":"`+long+`"}]},"expected_count":1,"initial_count":0}`)
	out, _ = s.run(t, "--input", tasks, "--context", "full,window:1,budget:1", "--concurrency", "6", "--max-rounds", strconv.Itoa(overflowRounds),
		"--model-url", small.url(), "--model", "toolcall", "--server", counterServer, "--seed", "7")
	over := readStrategyRun(t, out, 6)
	refusal := regexp.MustCompile(`HTTP 400 exceed_context_size_error: request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)`)
	refused := func(k armRollout, rec journalRecord) int {
		m := refusal.FindStringSubmatch(rec.Error)
		if rec.Termination != "context_length" || rec.FailureClass != "" || !rec.HasReward || m == nil || m[2] != strconv.Itoa(ctxSize) {
			t.Fatalf("%s: termination %q class %q scored %v (%s), want context_length, scored, refused by the server at %d tokens",
				k, rec.Termination, rec.FailureClass, rec.HasReward, rec.Error, ctxSize)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	for _, arm := range []string{"full", "window:1", "budget:1"} {
		k := armRollout{arm, 1, 0}
		if n := refused(k, over.recs[k]); n <= ctxSize || over.recs[k].Rounds != 0 {
			t.Fatalf("%s: the task alone (%d tokens) was refused after %d rounds", k, n, over.recs[k].Rounds)
		}
	}
	k := armRollout{"full", 0, 0}
	rec := over.recs[k]
	n := refused(k, rec)
	if rec.Rounds < 1 || !slicesPrefix(rec.ContextTokens, full0) || n < ctxSize {
		t.Fatalf("%s: %d rounds with %v prompt tokens (the first run's %v), then %d refused", k, rec.Rounds, rec.ContextTokens, full0, n)
	}
	w, b := over.recs[armRollout{"window:1", 0, 0}], over.recs[armRollout{"budget:1", 0, 0}]
	for _, r := range []journalRecord{w, b} {
		if r.Termination != "max_rounds" || r.FailureClass != "" || r.Rounds != overflowRounds || r.ContextTokensMax >= ctxSize {
			t.Fatalf("%s: termination %q class %q rounds %d, largest request %d tokens (%s)", r.Arm, r.Termination, r.FailureClass, r.Rounds, r.ContextTokensMax, r.Error)
		}
	}
	// A budget smaller than the task sends what window:1 does: the task and the last round.
	if fmt.Sprint(w.ContextTokens) != fmt.Sprint(b.ContextTokens) {
		t.Fatalf("prompt tokens: window:1 %v, budget:1 %v", w.ContextTokens, b.ContextTokens)
	}
	t.Logf("on -c %d: full refused after %d rounds (request of %d tokens); window:1 and budget:1 ran %d rounds, at most %d tokens",
		ctxSize, rec.Rounds, n, overflowRounds, w.ContextTokensMax)
}

// slicesPrefix reports whether a is a prefix of b, or b of a.
func slicesPrefix(a, b []int) bool {
	n := min(len(a), len(b))
	return fmt.Sprint(a[:n]) == fmt.Sprint(b[:n])
}
