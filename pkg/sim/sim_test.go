package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/toolclient"
	"github.com/rollout-dev/rollout/pkg/wire"
)

// ---- fixtures ----

// A task whose plan finds two ids, fetches both records, and submits their values; the final
// answer is the submit tool's message.
const recordsRow = `{"id": 1, "responses_create_params": {"input": [
  {"role": "system", "content": "You fetch records."},
  {"role": "user", "content": [{"type": "input_text", "text": "Fetch the "}, {"type": "input_text", "text": "books."}]}],
 "tools": [
  {"type": "function", "name": "find_ids", "parameters": {"type": "object", "properties": {"category": {"type": "string"}}, "required": ["category"]}},
  {"type": "function", "name": "fetch_record", "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
  {"type": "function", "name": "submit_answer", "parameters": {"type": "object", "properties": {"values": {"type": "array", "items": {"type": "string"}}}, "required": ["values"]}}]},
 "reference_plan": {"rounds": [
   [{"name": "find_ids", "arguments": {"category": "books"}}],
   [{"name": "fetch_record", "arguments": {"id": {"$ref": "0/ids/0"}}}, {"name": "fetch_record", "arguments": {"id": {"$ref": "0/ids/1"}}}],
   [{"name": "submit_answer", "arguments": {"values": [{"$ref": "1/value"}, {"$ref": "2/value"}]}}]],
  "final": {"$ref": "3/message"}}}`

// A small task for the knobs: round 0 has one call with a number and a string, round 1 two
// calls, one of them with a reference.
const knobRow = `{"id": 2, "responses_create_params": {"input": "Do the knob task.",
 "tools": [
  {"type": "function", "name": "a", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}, "s": {"type": "string"}}}},
  {"type": "function", "name": "b", "parameters": {"type": "object", "properties": {"y": {"type": "string"}}}},
  {"type": "function", "name": "c", "parameters": {"type": "object", "properties": {"z": {"type": "array", "items": {"type": "integer"}}}}}]},
 "reference_plan": {"rounds": [
   [{"name": "a", "arguments": {"x": 1, "s": "abc"}}],
   [{"name": "b", "arguments": {"y": {"$ref": "0/v"}}}, {"name": "c", "arguments": {"z": [1, 2]}}]],
  "final": "done"}}`

// A task without a plan, with tools of many schema shapes.
const randomRow = `{"id": 3, "responses_create_params": {"input": [{"role": "user", "content": "Anything goes."}],
 "tools": [
  {"type": "function", "name": "search", "parameters": {"type": "object", "properties": {
     "query": {"type": "string", "minLength": 3, "maxLength": 20},
     "limit": {"type": "integer", "minimum": 1, "maximum": 5},
     "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
     "exact": {"type": "boolean"},
     "sort": {"type": "string", "enum": ["asc", "desc"]},
     "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4},
     "when": {"type": "string", "format": "date"},
     "range": {"type": "object", "properties": {"from": {"type": "integer"}, "to": {"type": ["integer", "null"]}}, "required": ["from", "to"]},
     "either": {"anyOf": [{"type": "integer", "minimum": 10, "maximum": 20}, {"type": "null"}]}},
   "required": ["query", "limit", "score", "exact", "sort", "tags", "when", "range", "either"], "additionalProperties": false}, "strict": true},
  {"type": "function", "name": "ping"},
  {"type": "function", "name": "pick", "parameters": {"type": "object", "properties": {"color": {"enum": ["red", "green", 3]}, "ids": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 3}, "uniqueItems": true}}, "required": ["color", "ids"]}}]}}`

func mustTask(t testing.TB, row string) *dataset.Task {
	t.Helper()
	r, err := dataset.NewReader(strings.NewReader(strings.ReplaceAll(row, "\n", " ")), "test.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	task, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if task.Err != nil {
		t.Fatal(task.Err)
	}
	return task
}

func mustTasks(t testing.TB, rows ...string) (*Tasks, []*dataset.Task) {
	t.Helper()
	var ts []*dataset.Task
	for _, row := range rows {
		ts = append(ts, mustTask(t, row))
	}
	tasks, err := NewTasks(ts...)
	if err != nil {
		t.Fatal(err)
	}
	return tasks, ts
}

func fixedNow() time.Time { return time.Unix(1_700_000_000, 0) }

func newSim(t testing.TB, tasks *Tasks, opt Options) (*Simulator, *httptest.Server) {
	t.Helper()
	if opt.Now == nil {
		opt.Now = fixedNow
	}
	s, err := New(tasks, opt)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

// baseRequest is the first request the runner sends for task.
func baseRequest(task *dataset.Task, seed int) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{
		Model:    "test-model",
		Messages: agent.ChatMessages(task.Params),
		Tools:    agent.ChatTools(task.Params.Tools),
		Seed:     &seed,
	}
}

type chatResp struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role      string         `json:"role"`
			Content   *string        `json:"content"`
			ToolCalls []wireToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Param   any    `json:"param"`
		Code    any    `json:"code"`
	} `json:"error"`
}

func (r *chatResp) calls() []wireToolCall { return r.Choices[0].Message.ToolCalls }

func (r *chatResp) text() string {
	if c := r.Choices[0].Message.Content; c != nil {
		return *c
	}
	return ""
}

// post sends body (marshalled unless it is a string or []byte) and decodes the answer.
func post(t testing.TB, url string, body any) (int, http.Header, []byte, *chatResp) {
	t.Helper()
	var b []byte
	switch x := body.(type) {
	case string:
		b = []byte(x)
	case []byte:
		b = x
	default:
		var err error
		if b, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var cr chatResp
	if err := json.Unmarshal(raw, &cr); err != nil {
		t.Fatalf("answer is not JSON: %v: %s", err, raw)
	}
	if resp.StatusCode == http.StatusOK && len(cr.Choices) != 1 {
		t.Fatalf("answer has %d choices: %s", len(cr.Choices), raw)
	}
	return resp.StatusCode, resp.Header, raw, &cr
}

// step is one answer of a conversation.
type step struct {
	raw  []byte
	resp *chatResp
}

// play runs a whole conversation the way the runner does: each tool call gets a tool message
// with exec's output; injected 429/500 are retried with the identical request.
func play(t testing.TB, url string, req openai.ChatCompletionRequest, exec func(name, args string) string) []step {
	t.Helper()
	var steps []step
	for range 12 {
		var status int
		var raw []byte
		var cr *chatResp
		for try := 0; ; try++ {
			status, _, raw, cr = post(t, url, req)
			if status != http.StatusTooManyRequests && status != http.StatusInternalServerError {
				break
			}
			if try > 200 {
				t.Fatalf("still %d after %d tries", status, try)
			}
		}
		if status != http.StatusOK {
			t.Fatalf("status %d: %s", status, raw)
		}
		steps = append(steps, step{raw, cr})
		msg := openai.ChatCompletionMessage{Role: "assistant", Content: cr.text()}
		for _, tc := range cr.calls() {
			msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{ID: tc.ID, Type: "function",
				Function: openai.FunctionCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments}})
		}
		req.Messages = append(req.Messages, msg)
		if len(msg.ToolCalls) == 0 {
			return steps
		}
		for _, tc := range msg.ToolCalls {
			req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: "tool", ToolCallID: tc.ID,
				Content: exec(tc.Function.Name, tc.Function.Arguments)})
		}
	}
	t.Fatal("conversation did not end")
	return nil
}

// recordsTool answers the records task's tools; the ids and values are not in the plan, so
// the simulator can only have them from the tool messages.
func recordsTool(name, args string) string {
	var a map[string]any
	if err := json.Unmarshal([]byte(args), &a); err != nil {
		return "Error: arguments are not JSON"
	}
	switch name {
	case "find_ids":
		return `{"ids": [17, 42], "category": "` + fmt.Sprint(a["category"]) + `"}`
	case "fetch_record":
		return fmt.Sprintf(`{"value": "rec%v"}`, a["id"])
	case "submit_answer":
		vals, _ := a["values"].([]any)
		parts := make([]string, len(vals))
		for i, v := range vals {
			parts[i] = fmt.Sprint(v)
		}
		return `{"message": "accepted ` + strings.Join(parts, ",") + `"}`
	}
	return "Error: unknown tool"
}

func knobTool(name, args string) string {
	if name == "a" {
		return `{"v": "from-a"}`
	}
	return `{"ok": true}`
}

// ---- playing a plan ----

func TestPlayPlanWithGoOpenAI(t *testing.T) {
	tasks, rows := mustTasks(t, recordsRow)
	s, srv := newSim(t, tasks, Options{Seed: 7})
	cfg := openai.DefaultConfig("")
	cfg.BaseURL = srv.URL + "/v1"
	client := openai.NewClientWithConfig(cfg)
	ctx := context.Background()
	req := baseRequest(rows[0], 11)

	call := func() openai.ChatCompletionMessage {
		t.Helper()
		resp, err := client.CreateChatCompletion(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Object != "chat.completion" || resp.Model != "test-model" || !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Created != fixedNow().Unix() {
			t.Errorf("completion header: %+v", resp)
		}
		if resp.Usage.PromptTokens <= 0 || resp.Usage.CompletionTokens <= 0 || resp.Usage.TotalTokens != resp.Usage.PromptTokens+resp.Usage.CompletionTokens {
			t.Errorf("usage: %+v", resp.Usage)
		}
		msg := resp.Choices[0].Message
		want := openai.FinishReasonToolCalls
		if len(msg.ToolCalls) == 0 {
			want = openai.FinishReasonStop
		}
		if resp.Choices[0].FinishReason != want {
			t.Errorf("finish_reason %q, want %q", resp.Choices[0].FinishReason, want)
		}
		req.Messages = append(req.Messages, msg)
		return msg
	}
	reply := func(id, out string) {
		req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: "tool", ToolCallID: id, Content: out})
	}
	argsOf := func(tc openai.ToolCall) string {
		var v any
		if err := json.Unmarshal([]byte(tc.Function.Arguments), &v); err != nil {
			t.Fatalf("arguments %q: %v", tc.Function.Arguments, err)
		}
		b, _ := json.Marshal(v)
		return string(b)
	}

	// Round 0: the plan's literal arguments.
	m := call()
	if len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "find_ids" || argsOf(m.ToolCalls[0]) != `{"category":"books"}` {
		t.Fatalf("round 0: %+v", m.ToolCalls)
	}
	if tc := m.ToolCalls[0]; tc.Type != openai.ToolTypeFunction || !strings.HasPrefix(tc.ID, "call_0_") || len(tc.ID) != len("call_0_")+8 {
		t.Errorf("round 0 call: id %q type %q", tc.ID, tc.Type)
	}
	// Ids the plan knows nothing of: the next round must use them.
	reply(m.ToolCalls[0].ID, `{"ids": [101, 202, 303]}`)

	m = call()
	if len(m.ToolCalls) != 2 {
		t.Fatalf("round 1: %+v", m.ToolCalls)
	}
	for i, want := range []string{`{"id":101}`, `{"id":202}`} {
		tc := m.ToolCalls[i]
		if tc.Function.Name != "fetch_record" || argsOf(tc) != want {
			t.Errorf("round 1 call %d: %s %s, want fetch_record %s", i, tc.Function.Name, tc.Function.Arguments, want)
		}
		if !strings.HasPrefix(tc.ID, fmt.Sprintf("call_%d_", i+1)) {
			t.Errorf("round 1 call %d id %q", i, tc.ID)
		}
	}
	// Answered in the other order: matched by tool_call_id, not by position.
	reply(m.ToolCalls[1].ID, `{"value": "second"}`)
	reply(m.ToolCalls[0].ID, `{"value": "first"}`)

	m = call()
	if len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "submit_answer" || argsOf(m.ToolCalls[0]) != `{"values":["first","second"]}` {
		t.Fatalf("round 2: %+v", m.ToolCalls)
	}
	reply(m.ToolCalls[0].ID, `{"message": "accepted <2> & done"}`)

	m = call()
	if len(m.ToolCalls) != 0 || m.Content != "accepted <2> & done" {
		t.Fatalf("final: %+v", m)
	}
	st := s.Stats()
	if st.Requests != 4 || st.Answers != 4 || st.FinalAnswers != 1 || st.ToolCalls != 4 || st.Planned != 4 || st.Unplanned != 0 || st.Injected.Total() != 0 {
		t.Errorf("stats: %+v", st)
	}
}

func TestPlayPlanRawAndFinalText(t *testing.T) {
	tasks, rows := mustTasks(t, recordsRow)
	_, srv := newSim(t, tasks, Options{})
	steps := play(t, srv.URL, baseRequest(rows[0], 1), recordsTool)
	if len(steps) != 4 {
		t.Fatalf("%d answers, want 4", len(steps))
	}
	last := steps[3].resp
	if last.text() != "accepted rec17,rec42" || last.Choices[0].FinishReason != "stop" {
		t.Errorf("final answer %q (%s)", last.text(), last.Choices[0].FinishReason)
	}
	if !bytes.Contains(steps[0].raw, []byte(`"content":null`)) {
		t.Errorf("a tool-call answer's content should be null: %s", steps[0].raw)
	}
}

func TestFinalTextWhenRefsAreMissing(t *testing.T) {
	// A final that is not a string is written as JSON; an unanswered reference is null.
	row := strings.Replace(recordsRow, `"final": {"$ref": "3/message"}`, `"final": {"first": {"$ref": "1/value"}, "ids": {"$ref": "0/ids"}}`, 1)
	tasks, rows := mustTasks(t, row)
	_, srv := newSim(t, tasks, Options{})
	steps := play(t, srv.URL, baseRequest(rows[0], 1), recordsTool)
	if got := steps[len(steps)-1].resp.text(); got != `{"first":"rec17","ids":[17,42]}` {
		t.Errorf("final %s", got)
	}

	// Without tools after round 0: the final text from what there is.
	req := baseRequest(rows[0], 1)
	_, _, _, r0 := post(t, srv.URL, req)
	req.Messages = append(req.Messages,
		openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: r0.calls()[0].ID, Type: "function", Function: openai.FunctionCall{Name: "find_ids", Arguments: "{}"}}}},
		openai.ChatCompletionMessage{Role: "tool", ToolCallID: r0.calls()[0].ID, Content: `{"ids": [5]}`})
	req.Tools = nil
	_, _, raw, r1 := post(t, srv.URL, req)
	if len(r1.calls()) != 0 || r1.text() != `{"first":null,"ids":[5]}` || r1.Choices[0].FinishReason != "stop" {
		t.Errorf("answer without tools: %s", raw)
	}
}

func TestNoToolsOrToolChoiceNone(t *testing.T) {
	tasks, rows := mustTasks(t, knobRow)
	_, srv := newSim(t, tasks, Options{})
	req := baseRequest(rows[0], 3)
	req.Tools = nil
	_, _, raw, r := post(t, srv.URL, req)
	if len(r.calls()) != 0 || r.text() != "done" {
		t.Errorf("no tools: %s", raw)
	}
	req = baseRequest(rows[0], 3)
	req.ToolChoice = "none"
	_, _, raw, r = post(t, srv.URL, req)
	if len(r.calls()) != 0 || r.text() != "done" {
		t.Errorf("tool_choice none: %s", raw)
	}
	// A forced function: only that tool is offered, so round 0 (a) is left out and round 1
	// goes on with c alone.
	req = baseRequest(rows[0], 3)
	req.ToolChoice = openai.ToolChoice{Type: openai.ToolTypeFunction, Function: openai.ToolFunction{Name: "c"}}
	_, _, raw, r = post(t, srv.URL, req)
	if len(r.calls()) != 1 || r.calls()[0].Function.Name != "c" {
		t.Errorf("tool_choice c: %s", raw)
	}
}

func TestUnofferedToolIsLeftOut(t *testing.T) {
	row := strings.Replace(knobRow, `[{"name": "a", "arguments": {"x": 1, "s": "abc"}}],`,
		`[{"name": "a", "arguments": {"x": 1, "s": "abc"}}], [{"name": "secret", "arguments": {}}],`, 1)
	tasks, rows := mustTasks(t, row)
	s, srv := newSim(t, tasks, Options{})
	steps := play(t, srv.URL, baseRequest(rows[0], 1), knobTool)
	var names [][]string
	for _, st := range steps {
		var n []string
		for _, c := range st.resp.calls() {
			n = append(n, c.Function.Name)
		}
		names = append(names, n)
	}
	if !reflect.DeepEqual(names, [][]string{{"a"}, {"b", "c"}, nil}) {
		t.Errorf("calls by round: %v", names)
	}
	// b's reference to a's output still resolves: calls are numbered in plan order (a=0,
	// secret=1, b=2, c=3).
	if got := steps[1].resp.calls()[0]; got.Function.Arguments != `{"y":"from-a"}` || !strings.HasPrefix(got.ID, "call_2_") {
		t.Errorf("b: %+v", got)
	}
	if st := s.Stats(); st.UnofferedCalls != 1 {
		t.Errorf("unoffered calls %d, want 1", st.UnofferedCalls)
	}
}

func TestForeignCallIDsAreIgnored(t *testing.T) {
	tasks, rows := mustTasks(t, knobRow)
	_, srv := newSim(t, tasks, Options{})
	req := baseRequest(rows[0], 1)
	// A call id of the simulator's form, but not made by it (wrong digits), does not count as
	// plan call 0: the plan starts from round 0.
	req.Messages = append(req.Messages,
		openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: "call_0_00000000", Type: "function", Function: openai.FunctionCall{Name: "a", Arguments: "{}"}}}},
		openai.ChatCompletionMessage{Role: "tool", ToolCallID: "call_0_00000000", Content: "{}"})
	_, _, raw, r := post(t, srv.URL, req)
	if len(r.calls()) != 1 || r.calls()[0].Function.Name != "a" {
		t.Errorf("answer: %s", raw)
	}
}

// ---- conversations without a plan ----

func TestUnplannedConversationMakesSchemaValidCalls(t *testing.T) {
	tasks, rows := mustTasks(t, randomRow)
	s, srv := newSim(t, tasks, Options{Seed: 5})
	schemas := map[string]any{}
	for _, tool := range rows[0].Params.Tools {
		var sc any = map[string]any{"type": "object"}
		if tool.Parameters != nil {
			sc = decodeNumbers(t, string(tool.Parameters))
		}
		schemas[tool.Name] = sc
	}
	roundsSeen := map[int]bool{}
	toolsSeen := map[string]bool{}
	for seed := range 40 {
		req := baseRequest(rows[0], seed)
		if seed%2 == 1 {
			req.ParallelToolCalls = false
		}
		steps := play(t, srv.URL, req, func(name, args string) string { return `{"ok": true}` })
		rounds := len(steps) - 1
		if rounds < 1 || rounds > 3 {
			t.Errorf("seed %d: %d rounds of tool calls, want 1 to 3", seed, rounds)
		}
		roundsSeen[rounds] = true
		calls := 0
		for i, st := range steps[:rounds] {
			cs := st.resp.calls()
			if len(cs) < 1 || len(cs) > 3 || (seed%2 == 1 && len(cs) != 1) {
				t.Errorf("seed %d round %d: %d calls", seed, i, len(cs))
			}
			for j, c := range cs {
				calls++
				toolsSeen[c.Function.Name] = true
				if want := fmt.Sprintf("call_r%d_%d_", i, j); !strings.HasPrefix(c.ID, want) {
					t.Errorf("id %q, want prefix %q", c.ID, want)
				}
				if err := validate(schemas[c.Function.Name], decodeNumbers(t, c.Function.Arguments), "args"); err != nil {
					t.Errorf("seed %d: %s(%s): %v", seed, c.Function.Name, c.Function.Arguments, err)
				}
			}
		}
		if got, want := steps[rounds].resp.text(), fmt.Sprintf("Finished after %d tool calls.", calls); got != want {
			t.Errorf("seed %d: final %q, want %q", seed, got, want)
		}
	}
	if len(roundsSeen) < 2 || len(toolsSeen) != 3 {
		t.Errorf("little variety: rounds %v, tools %v", roundsSeen, toolsSeen)
	}
	if st := s.Stats(); st.Planned != 0 || st.Unplanned == 0 {
		t.Errorf("stats %+v", st)
	}

	// A conversation of no known task at all, with no Tasks.
	_, srv2 := newSim(t, nil, Options{})
	steps := play(t, srv2.URL, baseRequest(mustTask(t, knobRow), 1), knobTool)
	if len(steps) < 2 || !strings.HasPrefix(steps[len(steps)-1].resp.text(), "Finished after") {
		t.Errorf("unknown conversation: %d answers", len(steps))
	}
}

func decodeNumbers(t testing.TB, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}

// validate checks v against the JSON Schema subset the tests use.
func validate(schema, v any, at string) error {
	s, _ := schema.(map[string]any)
	if enum, ok := s["enum"].([]any); ok {
		for _, e := range enum {
			if reflect.DeepEqual(e, v) {
				return nil
			}
		}
		return fmt.Errorf("%s: %v not in enum %v", at, v, enum)
	}
	if alts, ok := s["anyOf"].([]any); ok {
		for _, a := range alts {
			if validate(a, v, at) == nil {
				return nil
			}
		}
		return fmt.Errorf("%s: %v matches no anyOf", at, v)
	}
	var types []string
	switch x := s["type"].(type) {
	case string:
		types = []string{x}
	case []any:
		for _, e := range x {
			types = append(types, e.(string))
		}
	}
	if len(types) == 0 {
		return nil
	}
	var errs []string
	for _, typ := range types {
		err := validateType(s, typ, v, at)
		if err == nil {
			return nil
		}
		errs = append(errs, err.Error())
	}
	return fmt.Errorf("%s", strings.Join(errs, "; "))
}

func validateType(s map[string]any, typ string, v any, at string) error {
	num := func(k string) (float64, bool) {
		n, ok := s[k].(json.Number)
		if !ok {
			return 0, false
		}
		f, _ := n.Float64()
		return f, true
	}
	switch typ {
	case "null":
		if v != nil {
			return fmt.Errorf("%s: %v is not null", at, v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: %v is not a boolean", at, v)
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: %v is not a string", at, v)
		}
		if n, ok := num("minLength"); ok && float64(len(str)) < n {
			return fmt.Errorf("%s: %q shorter than %v", at, str, n)
		}
		if n, ok := num("maxLength"); ok && float64(len(str)) > n {
			return fmt.Errorf("%s: %q longer than %v", at, str, n)
		}
		if s["format"] == "date" {
			if _, err := time.Parse("2006-01-02", str); err != nil {
				return fmt.Errorf("%s: %q is not a date", at, str)
			}
		}
	case "integer", "number":
		n, ok := v.(json.Number)
		if !ok {
			return fmt.Errorf("%s: %v is not a number", at, v)
		}
		f, _ := n.Float64()
		if typ == "integer" && strings.ContainsAny(string(n), ".eE") {
			return fmt.Errorf("%s: %v is not an integer", at, v)
		}
		if m, ok := num("minimum"); ok && f < m {
			return fmt.Errorf("%s: %v < minimum %v", at, f, m)
		}
		if m, ok := num("maximum"); ok && f > m {
			return fmt.Errorf("%s: %v > maximum %v", at, f, m)
		}
		if m, ok := num("exclusiveMinimum"); ok && f <= m {
			return fmt.Errorf("%s: %v <= exclusiveMinimum %v", at, f, m)
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: %v is not an array", at, v)
		}
		if n, ok := num("minItems"); ok && float64(len(arr)) < n {
			return fmt.Errorf("%s: %d items, fewer than %v", at, len(arr), n)
		}
		if n, ok := num("maxItems"); ok && float64(len(arr)) > n {
			return fmt.Errorf("%s: %d items, more than %v", at, len(arr), n)
		}
		seen := map[string]bool{}
		for i, e := range arr {
			if err := validate(s["items"], e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
			if s["uniqueItems"] == true {
				k := fmt.Sprint(e)
				if seen[k] {
					return fmt.Errorf("%s: duplicate item %v", at, e)
				}
				seen[k] = true
			}
		}
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %v is not an object", at, v)
		}
		props, _ := s["properties"].(map[string]any)
		req, _ := s["required"].([]any)
		for _, r := range req {
			if _, ok := obj[r.(string)]; !ok {
				return fmt.Errorf("%s: required %q missing", at, r)
			}
		}
		for k, e := range obj {
			ps, ok := props[k]
			if !ok && s["additionalProperties"] == false {
				return fmt.Errorf("%s: unexpected property %q", at, k)
			}
			if err := validate(ps, e, at+"."+k); err != nil {
				return err
			}
		}
	}
	return nil
}

// ---- knobs ----

// firstAnswer plays round 0 of the knob task with request seed seed.
func firstAnswer(t testing.TB, url string, task *dataset.Task, seed int) (int, http.Header, *chatResp) {
	status, hdr, _, r := post(t, url, baseRequest(task, seed))
	return status, hdr, r
}

// Effects on the knob task's first answer.
var knobEffects = map[string]func(status int, hdr http.Header, r *chatResp) bool{
	"WrongArgument": func(status int, _ http.Header, r *chatResp) bool {
		return status == 200 && len(r.calls()) == 1 && r.calls()[0].Function.Arguments != `{"x":1,"s":"abc"}`
	},
	"SkipStep": func(status int, _ http.Header, r *chatResp) bool {
		return status == 200 && len(r.calls()) > 0 && r.calls()[0].Function.Name != "a"
	},
	"PrematureAnswer": func(status int, _ http.Header, r *chatResp) bool {
		return status == 200 && len(r.calls()) == 0
	},
	"MalformedToolCall": func(status int, _ http.Header, r *chatResp) bool {
		return status == 200 && len(r.calls()) > 0 && !json.Valid([]byte(r.calls()[0].Function.Arguments))
	},
	"HTTP429": func(status int, _ http.Header, _ *chatResp) bool { return status == http.StatusTooManyRequests },
	"HTTP500": func(status int, _ http.Header, _ *chatResp) bool { return status == http.StatusInternalServerError },
}

func withRate(name string, p float64) Options {
	var o Options
	switch name {
	case "WrongArgument":
		o.WrongArgument = p
	case "SkipStep":
		o.SkipStep = p
	case "PrematureAnswer":
		o.PrematureAnswer = p
	case "MalformedToolCall":
		o.MalformedToolCall = p
	case "HTTP429":
		o.HTTP429 = p
	case "HTTP500":
		o.HTTP500 = p
	}
	return o
}

func injected(st Stats, name string) int64 {
	return reflect.ValueOf(st.Injected).FieldByName(name).Int()
}

func TestKnobsAtOneAndZero(t *testing.T) {
	tasks, rows := mustTasks(t, knobRow)
	task := rows[0]
	for name, effect := range knobEffects {
		t.Run(name, func(t *testing.T) {
			s, srv := newSim(t, tasks, withRate(name, 1))
			for seed := range 20 {
				status, hdr, r := firstAnswer(t, srv.URL, task, seed)
				if !effect(status, hdr, r) {
					t.Fatalf("seed %d: rate 1 without effect: %d %+v", seed, status, r)
				}
			}
			if got := injected(s.Stats(), name); got != 20 {
				t.Errorf("Stats.Injected.%s = %d, want 20", name, got)
			}
			s0, srv0 := newSim(t, tasks, withRate(name, 0))
			for seed := range 50 {
				status, hdr, r := firstAnswer(t, srv0.URL, task, seed)
				if effect(status, hdr, r) {
					t.Fatalf("seed %d: rate 0 with effect: %d %+v", seed, status, r)
				}
			}
			if st := s0.Stats(); st.Injected.Total() != 0 {
				t.Errorf("rate 0 injected %+v", st.Injected)
			}
		})
	}
}

func TestKnobEffectsInDetail(t *testing.T) {
	tasks, rows := mustTasks(t, knobRow)
	task := rows[0]

	// WrongArgument changes exactly one value, in a plausible way.
	_, srv := newSim(t, tasks, Options{WrongArgument: 1})
	seen := map[string]bool{}
	for seed := range 30 {
		_, _, r := firstAnswer(t, srv.URL, task, seed)
		seen[r.calls()[0].Function.Arguments] = true
	}
	for args := range seen {
		if args != `{"x":2,"s":"abc"}` && args != `{"x":1,"s":"abd"}` {
			t.Errorf("wrong argument %s", args)
		}
	}
	if len(seen) != 2 {
		t.Errorf("wrong arguments seen: %v", seen)
	}

	// SkipStep at 1: round 0's only call is left out, round 1 follows in the same answer (its
	// reference to the skipped call is null), and then the plan is over.
	_, srv = newSim(t, tasks, Options{SkipStep: 1})
	steps := play(t, srv.URL, baseRequest(task, 1), knobTool)
	if len(steps) != 2 || len(steps[0].resp.calls()) != 2 || steps[0].resp.calls()[0].Function.Arguments != `{"y":null}` || steps[1].resp.text() != "done" {
		t.Errorf("skip step: %s / %s", steps[0].raw, steps[len(steps)-1].raw)
	}

	// PrematureAnswer at 1: the final text at once.
	_, srv = newSim(t, tasks, Options{PrematureAnswer: 1})
	_, _, r := firstAnswer(t, srv.URL, task, 1)
	if r.text() != "done" || r.Choices[0].FinishReason != "stop" {
		t.Errorf("premature: %+v", r)
	}

	// MalformedToolCall: truncated JSON.
	_, srv = newSim(t, tasks, Options{MalformedToolCall: 1})
	_, _, r = firstAnswer(t, srv.URL, task, 1)
	if a := r.calls()[0].Function.Arguments; !strings.HasPrefix(`{"x":1,"s":"abc"}`, a) || len(a) == 0 {
		t.Errorf("malformed: %q", a)
	}

	// HTTP429 with Retry-After, OpenAI-style error.
	_, srv = newSim(t, tasks, Options{HTTP429: 1, RetryAfter: 1500 * time.Millisecond})
	status, hdr, _, r := post(t, srv.URL, baseRequest(task, 1))
	if status != 429 || hdr.Get("Retry-After") != "2" || r.Error == nil || r.Error.Code != "rate_limit_exceeded" || r.Error.Message == "" {
		t.Errorf("429: %d %v %+v", status, hdr, r.Error)
	}
	_, srv = newSim(t, tasks, Options{HTTP500: 1})
	status, hdr, _, r = post(t, srv.URL, baseRequest(task, 1))
	if status != 500 || hdr.Get("Retry-After") != "" || r.Error == nil || r.Error.Type != "server_error" {
		t.Errorf("500: %d %+v", status, r.Error)
	}
}

func TestKnobRates(t *testing.T) {
	if testing.Short() {
		t.Skip("statistical")
	}
	tasks, rows := mustTasks(t, knobRow)
	const n, p = 400, 0.3
	for name, effect := range knobEffects {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, srv := newSim(t, tasks, withRate(name, p))
			hits := 0
			for seed := range n {
				status, hdr, r := firstAnswer(t, srv.URL, rows[0], seed)
				if effect(status, hdr, r) {
					hits++
				}
			}
			if f := float64(hits) / n; math.Abs(f-p) > 0.08 {
				t.Errorf("rate %v: effect in %d of %d", p, hits, n)
			}
		})
	}
}

func TestToolCountErrorSlope(t *testing.T) {
	tasks, rows := mustTasks(t, knobRow) // offers 3 tools
	for _, tt := range []struct {
		baseline int
		slope    float64
		always   bool
	}{
		{baseline: 2, slope: 1, always: true},  // one tool over: p = 1
		{baseline: 3, slope: 1, always: false}, // none over: p = 0
		{baseline: 0, slope: 0, always: false}, // off
	} {
		s, srv := newSim(t, tasks, Options{ToolCountErrorSlope: tt.slope, ToolCountBaseline: tt.baseline})
		for seed := range 20 {
			status, hdr, r := firstAnswer(t, srv.URL, rows[0], seed)
			if got := knobEffects["WrongArgument"](status, hdr, r); got != tt.always {
				t.Fatalf("%+v seed %d: wrong argument %v", tt, seed, got)
			}
		}
		if got := s.Stats().Injected.WrongArgument; (got == 20) != tt.always {
			t.Errorf("%+v: %d wrong arguments counted", tt, got)
		}
	}
	s, _ := New(nil, Options{WrongArgument: 0.1, ToolCountErrorSlope: 0.05, ToolCountBaseline: 5})
	for tools, want := range map[int]float64{0: 0.1, 5: 0.1, 6: 0.15, 15: 0.6, 100: 1} {
		if got := s.wrongArgumentRate(tools); math.Abs(got-want) > 1e-9 {
			t.Errorf("rate with %d tools = %v, want %v", tools, got, want)
		}
	}
}

// ---- determinism ----

func TestDeterminism(t *testing.T) {
	rowsText := []string{recordsRow, knobRow, randomRow}
	tasks, rows := mustTasks(t, rowsText...)
	opt := Options{Seed: 42, WrongArgument: 0.3, SkipStep: 0.3, PrematureAnswer: 0.2, MalformedToolCall: 0.2, HTTP429: 0.3, HTTP500: 0.2}
	exec := func(name, args string) string {
		if name == "a" {
			return knobTool(name, args)
		}
		return recordsTool(name, args)
	}
	type key struct{ task, seed int }
	// run plays every (task, seed) conversation concurrently, in the given order.
	run := func(opt Options, reverse bool) map[key][]string {
		_, srv := newSim(t, tasks, opt)
		var keys []key
		for i := range rows {
			for seed := range 10 {
				keys = append(keys, key{i, seed})
			}
		}
		if reverse {
			slices.Reverse(keys)
		}
		out := map[key][]string{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for _, k := range keys {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				steps := play(t, srv.URL, baseRequest(rows[k.task], k.seed), exec)
				var raws []string
				for _, s := range steps {
					raws = append(raws, string(s.raw))
				}
				mu.Lock()
				out[k] = raws
				mu.Unlock()
			})
		}
		wg.Wait()
		return out
	}
	a := run(opt, false)
	b := run(opt, true)
	if !reflect.DeepEqual(a, b) {
		for k := range a {
			if !reflect.DeepEqual(a[k], b[k]) {
				t.Errorf("conversation %v differs:\n%q\n%q", k, a[k], b[k])
				break
			}
		}
	}
	opt.Seed = 43
	c := run(opt, false)
	diff := 0
	for k := range a {
		if !reflect.DeepEqual(a[k], c[k]) {
			diff++
		}
	}
	if diff == 0 {
		t.Error("seeds 42 and 43 gave the same answers")
	}
}

func TestConversationIdentityIncludesRequestSeed(t *testing.T) {
	tasks, rows := mustTasks(t, randomRow)
	_, srv := newSim(t, tasks, Options{})
	args := map[string]bool{}
	for seed := range 10 {
		_, _, _, r := post(t, srv.URL, baseRequest(rows[0], seed))
		args[r.calls()[0].Function.Arguments] = true
	}
	req := baseRequest(rows[0], 0)
	req.Seed = nil
	_, _, _, r := post(t, srv.URL, req)
	args[r.calls()[0].Function.Arguments] = true
	if len(args) < 8 {
		t.Errorf("only %d distinct first calls over 11 request seeds", len(args))
	}
}

// ---- HTTP errors and retries ----

func TestRateLimitThenRetrySucceeds(t *testing.T) {
	tasks, rows := mustTasks(t, knobRow)
	s, srv := newSim(t, tasks, Options{HTTP429: 0.5, RetryAfter: time.Second})
	first429 := 0
	for seed := range 30 {
		req := baseRequest(rows[0], seed)
		for try := 0; ; try++ {
			status, hdr, _, r := post(t, srv.URL, req)
			if status == http.StatusOK {
				if len(r.calls()) != 1 || r.calls()[0].Function.Name != "a" {
					t.Errorf("seed %d: answer after retries: %+v", seed, r)
				}
				break
			}
			if status != http.StatusTooManyRequests || hdr.Get("Retry-After") != "1" {
				t.Fatalf("seed %d: status %d, Retry-After %q", seed, status, hdr.Get("Retry-After"))
			}
			if try == 0 {
				first429++
			}
			if try > 40 {
				t.Fatalf("seed %d: still 429 after %d tries", seed, try)
			}
		}
	}
	if first429 == 0 || first429 == 30 {
		t.Errorf("%d of 30 first attempts rate-limited at rate 0.5", first429)
	}
	if st := s.Stats(); st.Injected.HTTP429 < int64(first429) || st.Answers != 30 {
		t.Errorf("stats %+v", st)
	}
}

func TestAttemptTableIsBounded(t *testing.T) {
	s, err := New(nil, Options{HTTP500: 0.5, MaxTrackedRequests: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		s.attempt([16]byte{byte(i)})
	}
	if n := len(s.attempts); n > 3 {
		t.Errorf("%d fingerprints kept, want at most 3", n)
	}
	if a, b := s.attempt([16]byte{42}), s.attempt([16]byte{42}); a != 0 || b != 1 {
		t.Errorf("attempts %d, %d; want 0, 1", a, b)
	}
}

// The runner's own loop (pkg/agent) with the runner's retrying client (pkg/retry) plays the
// plan to the end through injected 429s and 500s.
func TestRunnerLoopPlaysPlan(t *testing.T) {
	tasks, rows := mustTasks(t, recordsRow)
	s, srv := newSim(t, tasks, Options{Seed: 3, HTTP429: 0.4, HTTP500: 0.3})
	doer := &retry.Doer{Client: srv.Client(), Policy: retry.Policy{MaxAttempts: 30, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}}
	cfg := &agent.Config{Model: agent.NewOpenAIModel(srv.URL+"/v1", "", doer), ModelName: "sim"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for seed := range 5 {
		tr := cfg.Run(context.Background(), rows[0], toolsFunc(recordsTool), int64(seed))
		if tr.Termination != agent.Completed || tr.FinalText != "accepted rec17,rec42" || len(tr.Rounds) != 4 {
			t.Errorf("seed %d: %s %q %q, %d rounds", seed, tr.Termination, tr.Error, tr.FinalText, len(tr.Rounds))
		}
	}
	if st := s.Stats(); st.Injected.HTTP429+st.Injected.HTTP500 == 0 || st.Answers != 20 {
		t.Errorf("stats %+v", st)
	}
}

type toolsFunc func(name, args string) string

func (f toolsFunc) CallTool(_ context.Context, name, args string) toolclient.Result {
	return toolclient.Result{Output: f(name, args), Status: 200}
}

// ---- latency ----

func TestLatencyIsApplied(t *testing.T) {
	tasks, rows := mustTasks(t, knobRow)
	_, srv := newSim(t, tasks, Options{Latency: Latency{Dist: DistFixed, Mean: 60 * time.Millisecond}})
	start := time.Now()
	post(t, srv.URL, baseRequest(rows[0], 1))
	if d := time.Since(start); d < 60*time.Millisecond {
		t.Errorf("answered in %v, latency 60ms", d)
	}
}

func TestCancelledRequestReturnsDuringLatency(t *testing.T) {
	tasks, rows := mustTasks(t, knobRow)
	s, srv := newSim(t, tasks, Options{Latency: Latency{Dist: DistFixed, Mean: time.Minute}})
	body, _ := json.Marshal(baseRequest(rows[0], 1))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", bytes.NewReader(body))
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("request with a 1-minute latency answered within its 100ms deadline")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancelled request took %v", d)
	}
	// The handler notices and stops sleeping (srv.Close, at cleanup, would wait for it).
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Cancelled == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the handler is still sleeping")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestParseLatency(t *testing.T) {
	tests := []struct {
		in   string
		want Latency
		err  string
	}{
		{"", Latency{}, ""},
		{"0", Latency{}, ""},
		{"none", Latency{}, ""},
		{"0s", Latency{}, ""},
		{"100ms", Latency{Dist: DistFixed, Mean: 100 * time.Millisecond}, ""},
		{"fixed:1.5s", Latency{Dist: DistFixed, Mean: 1500 * time.Millisecond}, ""},
		{"uniform:50ms-150ms", Latency{Dist: DistUniform, Min: 50 * time.Millisecond, Max: 150 * time.Millisecond}, ""},
		{"uniform:0s-1s", Latency{Dist: DistUniform, Max: time.Second}, ""},
		{"normal:100ms,20ms", Latency{Dist: DistNormal, Mean: 100 * time.Millisecond, Stddev: 20 * time.Millisecond}, ""},
		{"normal: 100ms , 20ms", Latency{Dist: DistNormal, Mean: 100 * time.Millisecond, Stddev: 20 * time.Millisecond}, ""},
		{"exp:100ms", Latency{Dist: DistExponential, Mean: 100 * time.Millisecond}, ""},
		{"exponential:2s", Latency{Dist: DistExponential, Mean: 2 * time.Second}, ""},
		{"100", Latency{}, "not a duration"},
		{"-5ms", Latency{}, "negative"},
		{"uniform:150ms-50ms", Latency{}, "above the maximum"},
		{"uniform:50ms", Latency{}, "MIN-MAX"},
		{"uniform:-1s-2s", Latency{}, "not a duration"},
		{"normal:100ms", Latency{}, "MEAN,STDDEV"},
		{"normal:100ms,x", Latency{}, "not a duration"},
		{"exp:", Latency{}, "not a duration"},
		{"gamma:1s", Latency{}, "unknown distribution"},
	}
	for _, tt := range tests {
		got, err := ParseLatency(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseLatency(%q) = %+v, %v; want error with %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseLatency(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			continue
		}
		back, err := ParseLatency(got.String())
		if err != nil || back != got {
			t.Errorf("round trip of %q via %q: %+v, %v", tt.in, got.String(), back, err)
		}
	}
	var l Latency
	if err := l.Set("uniform:1ms-2ms"); err != nil || l.Dist != DistUniform {
		t.Errorf("Set: %+v %v", l, err)
	}
	if err := (Latency{Dist: "weird"}).Validate(); err == nil {
		t.Error("Validate accepted an unknown distribution")
	}
}

func TestLatencySample(t *testing.T) {
	d := drawer{seed: 1, conv: 2}
	const n = 4000
	mean := func(l Latency) (float64, time.Duration, time.Duration) {
		var sum float64
		lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
		for i := range n {
			v := l.Sample(d.float("l", i, 0), d.float("l", i, 1))
			sum += float64(v)
			lo, hi = min(lo, v), max(hi, v)
		}
		return sum / n, lo, hi
	}
	ms := float64(time.Millisecond)
	if m, lo, hi := mean(Latency{Dist: DistUniform, Min: 50 * time.Millisecond, Max: 150 * time.Millisecond}); math.Abs(m-100*ms) > 5*ms || lo < 50*time.Millisecond || hi > 150*time.Millisecond {
		t.Errorf("uniform: mean %v range %v-%v", time.Duration(m), lo, hi)
	}
	if m, lo, _ := mean(Latency{Dist: DistNormal, Mean: 100 * time.Millisecond, Stddev: 20 * time.Millisecond}); math.Abs(m-100*ms) > 3*ms || lo < 0 {
		t.Errorf("normal: mean %v min %v", time.Duration(m), lo)
	}
	if _, lo, _ := mean(Latency{Dist: DistNormal, Mean: time.Millisecond, Stddev: 10 * time.Millisecond}); lo != 0 {
		t.Errorf("normal is cut at 0, min %v", lo)
	}
	if m, lo, _ := mean(Latency{Dist: DistExponential, Mean: 100 * time.Millisecond}); math.Abs(m-100*ms) > 8*ms || lo < 0 {
		t.Errorf("exponential: mean %v", time.Duration(m))
	}
	if v := (Latency{Dist: DistFixed, Mean: time.Second}).Sample(0.3, 0.9); v != time.Second {
		t.Errorf("fixed: %v", v)
	}
	if v := (Latency{}).Sample(0.3, 0.9); v != 0 {
		t.Errorf("none: %v", v)
	}
}

// ---- options ----

func TestOptionsValidate(t *testing.T) {
	good := []Options{
		{},
		{Seed: -3, WrongArgument: 1, SkipStep: 0.5, PrematureAnswer: 0, MalformedToolCall: 1, HTTP429: 0.1, HTTP500: 1, RetryAfter: time.Second, ToolCountErrorSlope: 0.05, ToolCountBaseline: 5},
	}
	for _, o := range good {
		if err := o.Validate(); err != nil {
			t.Errorf("Validate(%+v): %v", o, err)
		}
	}
	bad := map[string]Options{
		"wrong-argument":         {WrongArgument: 1.01},
		"skip-step":              {SkipStep: -0.1},
		"premature-answer":       {PrematureAnswer: 2},
		"malformed-tool-call":    {MalformedToolCall: math.NaN()},
		"http-429":               {HTTP429: -1},
		"http-500":               {HTTP500: 1.5},
		"tool-count-error-slope": {ToolCountErrorSlope: 3},
		"baseline":               {ToolCountBaseline: -1},
		"retry-after":            {RetryAfter: -time.Second},
		"max tracked":            {MaxTrackedRequests: -1},
		"latency":                {Latency: Latency{Dist: DistUniform, Min: 2, Max: 1}},
	}
	for want, o := range bad {
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%+v) = %v, want an error about %s", o, err, want)
		}
		if _, err := New(nil, o); err == nil {
			t.Errorf("New accepted %+v", o)
		}
	}
}

// ---- requests and endpoints ----

func TestBadRequests(t *testing.T) {
	s, srv := newSim(t, nil, Options{})
	user := `{"role":"user","content":"hi"}`
	call := `{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`
	tests := []struct{ name, body, param string }{
		{"not JSON", `{"messages":`, ""},
		{"not an object", `[1]`, ""},
		{"no messages", `{"model":"m"}`, "messages"},
		{"messages not a list", `{"messages":{}}`, "messages"},
		{"bad role", `{"messages":[{"role":"robot","content":"x"}]}`, "messages[0].role"},
		{"bad content", `{"messages":[{"role":"user","content":5}]}`, "messages[0].content"},
		{"part without type", `{"messages":[{"role":"user","content":[{"text":"x"}]}]}`, "messages[0].content[0].type"},
		{"text part without text", `{"messages":[{"role":"user","content":[{"type":"text"}]}]}`, "messages[0].content[0].text"},
		{"tool without id", `{"messages":[` + user + `,` + call + `,{"role":"tool","content":"x"}]}`, "messages[2].tool_call_id"},
		{"tool answering nothing", `{"messages":[` + user + `,{"role":"tool","tool_call_id":"c9","content":"x"}]}`, "messages[1].tool_call_id"},
		{"call not answered", `{"messages":[` + user + `,` + call + `]}`, "messages"},
		{"call not answered before user", `{"messages":[` + user + `,` + call + `,` + user + `]}`, "messages"},
		{"call without name", `{"messages":[` + user + `,{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"arguments":"{}"}}]}]}`, "messages[1].tool_calls[0].function.name"},
		{"tool not a function", `{"messages":[` + user + `],"tools":[{"type":"retrieval"}]}`, "tools[0].type"},
		{"tool without name", `{"messages":[` + user + `],"tools":[{"type":"function","function":{}}]}`, "tools[0].function.name"},
		{"tool_choice without tools", `{"messages":[` + user + `],"tool_choice":"auto"}`, "tool_choice"},
		{"bad tool_choice", `{"messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes"}`, "tool_choice"},
		{"tool_choice of no tool", `{"messages":[` + user + `],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, "tool_choice"},
		{"stream", `{"messages":[` + user + `],"stream":true}`, "stream"},
		{"n", `{"messages":[` + user + `],"n":2}`, "n"},
	}
	for _, tt := range tests {
		status, _, raw, r := post(t, srv.URL, tt.body)
		if status != http.StatusBadRequest || r.Error == nil || r.Error.Type != "invalid_request_error" || r.Error.Message == "" {
			t.Errorf("%s: %d %s", tt.name, status, raw)
			continue
		}
		param, _ := r.Error.Param.(string)
		if param != tt.param {
			t.Errorf("%s: param %q, want %q (%s)", tt.name, param, tt.param, r.Error.Message)
		}
	}
	if st := s.Stats(); st.BadRequests != int64(len(tests)) || st.Answers != 0 {
		t.Errorf("stats %+v", st)
	}
	// A well-formed request with content parts, a developer message and no model.
	status, _, raw, r := post(t, srv.URL, `{"messages":[{"role":"developer","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"x"}}]}]}`)
	if status != 200 || r.Model != ModelID || r.text() == "" {
		t.Errorf("good request: %d %s", status, raw)
	}
}

func TestEndpoints(t *testing.T) {
	_, srv := newSim(t, nil, Options{})
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := get("/v1/models"); status != 200 || !strings.Contains(body, `"id":"rollout-sim"`) {
		t.Errorf("/v1/models: %d %s", status, body)
	}
	if status, body := get("/"); status != 200 || !strings.Contains(body, `"status":"ok"`) {
		t.Errorf("/: %d %s", status, body)
	}
	if status, _ := get("/v1/embeddings"); status != 404 {
		t.Errorf("/v1/embeddings: %d", status)
	}
	if status, _ := get("/v1/chat/completions"); status != 405 {
		t.Errorf("GET /v1/chat/completions: %d", status)
	}
	// Also without /v1.
	resp, err := http.Post(srv.URL+"/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("/chat/completions: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	// The counters, as the load benchmark polls them: the answer above, final and unplanned.
	status, body := get("/stats")
	var st Stats
	if err := json.Unmarshal([]byte(body), &st); status != 200 || err != nil {
		t.Fatalf("/stats: %d %s (%v)", status, body, err)
	}
	if st.Requests != 1 || st.Answers != 1 || st.FinalAnswers != 1 || st.Unplanned != 1 {
		t.Errorf("/stats after one answer: %+v", st)
	}
}

// ---- tasks ----

func TestFirstUserMessageAsTheRunnerSendsIt(t *testing.T) {
	rows := []string{
		`{"responses_create_params":{"input":"plain string"}}`,
		`{"responses_create_params":{"instructions":"sys","input":[{"role":"developer","content":"dev"},{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"output_text","text":"b"},{"type":"text","text":"c"}]},{"role":"user","content":"second"}]}}`,
		`{"responses_create_params":{"input":[{"role":"assistant","content":"hello"},{"type":"function_call","name":"f","call_id":"x","arguments":"{}"},{"type":"function_call_output","call_id":"x","output":"o"},{"role":"user","content":"late user"}]}}`,
		`{"responses_create_params":{"input":[{"role":"system","content":"only system"}]}}`,
	}
	for _, row := range rows {
		task := mustTask(t, row)
		firstUser, prompt := taskPrompt(task.Params)
		want, found := "", false
		for _, m := range agent.ChatMessages(task.Params) {
			if m.Role == "user" {
				want, found = m.Content, true
				break
			}
		}
		if firstUser != want {
			t.Errorf("%s: first user %q, runner sends %q (found %v)", row, firstUser, want, found)
		}
		// The request the runner builds gives the same conversation key.
		body, _ := json.Marshal(openai.ChatCompletionRequest{Model: "m", Messages: agent.ChatMessages(task.Params)})
		req, rerr := parseRequest(body)
		if rerr != nil {
			t.Fatalf("%s: %v", row, rerr.msg)
		}
		if u, p := req.conversation(); u != firstUser || p != prompt {
			t.Errorf("%s: request key (%q, %q), task key (%q, %q)", row, u, p, firstUser, prompt)
		}
	}
}

func TestTasksShareFirstUserMessage(t *testing.T) {
	// Same user message, different system prompts and plans: told apart by the whole prompt.
	row := func(system, tool string) string {
		return `{"responses_create_params":{"input":[{"role":"system","content":"` + system + `"},{"role":"user","content":"same"}],
			"tools":[{"type":"function","name":"` + tool + `"}]},
			"reference_plan":{"rounds":[[{"name":"` + tool + `","arguments":{}}]]}}`
	}
	tasks, rows := mustTasks(t, row("one", "t1"), row("two", "t2"), row("two", "t2"))
	if tasks.Len() != 3 || tasks.Plans() != 3 || tasks.NumWarnings() != 0 {
		t.Errorf("len %d plans %d warnings %v", tasks.Len(), tasks.Plans(), tasks.Warnings())
	}
	_, srv := newSim(t, tasks, Options{})
	for i, want := range []string{"t1", "t2"} {
		req := baseRequest(rows[i], 0)
		req.Tools = agent.ChatTools([]dataset.Tool{{Name: "t1"}, {Name: "t2"}})
		_, _, raw, r := post(t, srv.URL, req)
		if len(r.calls()) != 1 || r.calls()[0].Function.Name != want {
			t.Errorf("task %d: %s", i, raw)
		}
	}
}

// Tasks with the same prompt and different plans (one question, two worlds) are told apart by
// the row the request's X-Rollout-Id names; a request that names none of them is refused with
// both rows named, never given the other task's plan.
func TestSamePromptOtherPlan(t *testing.T) {
	row := func(tool string) string {
		return `{"responses_create_params":{"input":[{"role":"user","content":"same"}],"tools":[{"type":"function","name":"t1"},{"type":"function","name":"t2"}]},` +
			`"reference_plan":{"rounds":[[{"name":"` + tool + `","arguments":{}}]]}}`
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "tasks.jsonl")
	// Row 2 repeats row 0 exactly: one task, no warning.
	if err := os.WriteFile(path, []byte(row("t1")+"\n"+row("t2")+"\n"+row("t1")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tasks, err := LoadTasks(path)
	if err != nil {
		t.Fatal(err)
	}
	if tasks.NumWarnings() != 1 || !strings.Contains(tasks.Warnings()[0], path+":2: same prompt as "+path+":1 but another reference_plan") {
		t.Errorf("warnings %q", tasks.Warnings())
	}
	_, srv := newSim(t, tasks, Options{})
	task := mustTask(t, row("t1"))
	body, _ := json.Marshal(baseRequest(task, 0))
	ask := func(id string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", bytes.NewReader(body))
		if id != "" {
			req.Header.Set(RolloutHeader, id)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var r chatResp
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, string(raw)
		}
		if err := json.Unmarshal(raw, &r); err != nil || len(r.calls()) != 1 {
			t.Fatalf("%s: %s", id, raw)
		}
		return resp.StatusCode, r.calls()[0].Function.Name
	}
	esc := url.QueryEscape(path)
	for _, c := range []struct {
		id, want string
		status   int
	}{
		{"multi/" + esc + "/0/0", "t1", 200},
		{"multi/" + esc + "/1/3", "t2", 200},
		{"single/" + esc + "/2/0", "t1", 200},        // the repeat of row 0
		{"multi/other%2Ftasks.jsonl/1/0", "t2", 200}, // another path to the file: the row alone
		{"", path + ":1, " + path + ":2), and the request has no X-Rollout-Id header", 400},
		{"multi/" + esc + "/7/0", "names none of them", 400},
		{"garbage", "names none of them", 400},
	} {
		status, got := ask(c.id)
		if status != c.status || !strings.Contains(got, c.want) {
			t.Errorf("X-Rollout-Id %q: HTTP %d %s, want %d %s", c.id, status, got, c.status, c.want)
		}
	}
}

func TestLoadTasks(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, lines ...string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	one := func(s string) string { return strings.ReplaceAll(s, "\n", " ") }
	good := write("good.jsonl",
		one(recordsRow),
		`{"responses_create_params": {"input": 5}}`,
		``,
		one(randomRow),
		`{"responses_create_params": {"input": "with null plan"}, "reference_plan": null}`)
	more := write("more.jsonl", one(knobRow))
	tasks, err := LoadTasks(good, more)
	if err != nil {
		t.Fatal(err)
	}
	if tasks.Len() != 4 || tasks.Plans() != 2 || tasks.Skipped() != 1 {
		t.Errorf("len %d plans %d skipped %d", tasks.Len(), tasks.Plans(), tasks.Skipped())
	}
	if w := tasks.Warnings(); len(w) != 1 || !strings.HasPrefix(w[0], good+":2: responses_create_params.input") {
		t.Errorf("warnings %q", w)
	}
	if tasks.Plan("Fetch the books.") == nil || tasks.Plan("Do the knob task.") == nil || tasks.Plan("Anything goes.") != nil || tasks.Plan("nothing") != nil {
		t.Error("plans not indexed by first user message")
	}

	for _, tt := range []struct{ plan, want string }{
		{`{"rounds": [[{"arguments": {}}]]}`, ":2: reference_plan.rounds[0][0].name: missing"},
		{`{"rounds": []}`, ":2: reference_plan.rounds: empty"},
		{`{"rounds": [[{"name": "a", "arguments": {}}], [{"name": "b", "arguments": {"x": {"$ref": "5"}}}]]}`, `:2: reference_plan.rounds[1][0].arguments.x: reference "5": call 5 is not in an earlier round`},
		{`{"rounds": [[{"name": "a", "arguments": {}}]], "final": {"$ref": "x"}}`, `:2: reference_plan.final: reference "x"`},
		{`{"steps": []}`, `:2: reference_plan: not a plan: json: unknown field "steps"`},
		{`"plan"`, `:2: reference_plan: not a plan`},
	} {
		path := write("bad.jsonl", one(knobRow), `{"responses_create_params": {"input": "x"}, "reference_plan": `+tt.plan+`}`)
		_, err := LoadTasks(path)
		if err == nil || !strings.HasPrefix(err.Error(), path+tt.want) {
			t.Errorf("plan %s: error %v, want %s%s", tt.plan, err, path, tt.want)
		}
	}
	if _, err := LoadTasks(filepath.Join(dir, "missing.jsonl")); err == nil {
		t.Error("LoadTasks of a missing file: no error")
	}
}

// ---- pieces ----

func TestPerturb(t *testing.T) {
	tests := []struct {
		args string
		outs []string // the possible results
	}{
		{`{"n":41}`, []string{`{"n":42}`}},
		{`{"n":1.5}`, []string{`{"n":2.5}`}},
		{`{"n":99999999999999999999}`, []string{`{"n":100000000000000000000}`}},
		{`{"s":"abz"}`, []string{`{"s":"aba"}`}},
		{`{"s":"12"}`, []string{`{"s":"13"}`}},
		{`{"s":""}`, []string{`{"s":"x"}`}},
		{`{"s":"é!"}`, []string{`{"s":"éx"}`}},
		{`{"b":true}`, []string{`{"b":false}`}},
		{`{"a":[1,1]}`, []string{`{"a":[1]}`, `{"a":[2,1]}`, `{"a":[1,2]}`}},
		{`{"a":["x"]}`, []string{`{"a":[]}`, `{"a":["y"]}`}},
		{`{"a":[1,2]}`, []string{`{"a":[2,1]}`, `{"a":[2,2]}`, `{"a":[1,3]}`}},
		{`{"o":{"k":"<v>"}}`, []string{`{"o":{"k":"<vx"}}`}},
	}
	for _, tt := range tests {
		for i := range 20 {
			got, ok := perturb(tt.args, drawer{conv: uint64(i)}.rand("t", 0))
			if !ok || !slices.Contains(tt.outs, got) {
				t.Errorf("perturb(%s) = %s, %v; want one of %v", tt.args, got, ok, tt.outs)
				break
			}
		}
	}
	for _, args := range []string{`{}`, `{"a":null,"b":[],"c":{}}`, `not json`} {
		if got, ok := perturb(args, drawer{}.rand("t", 0)); ok || got != args {
			t.Errorf("perturb(%s) = %s, %v; want no change", args, got, ok)
		}
	}
}

func TestMalformed(t *testing.T) {
	for _, args := range []string{`{}`, `{"a":1}`, `{"s":"ééééé"}`, ``} {
		got := malformed(args)
		if json.Valid([]byte(got)) || got == "" || !strings.HasPrefix(args+"{", got) {
			t.Errorf("malformed(%q) = %q", args, got)
		}
	}
}

func TestProfiles(t *testing.T) {
	for _, name := range ProfileNames() {
		o, err := Profile(name)
		if err != nil {
			t.Fatalf("Profile(%q): %v", name, err)
		}
		if err := o.Validate(); err != nil {
			t.Errorf("profile %q is not valid: %v", name, err)
		}
	}
	if o, err := Profile(""); err != nil || o.WrongArgument != 0 || o.Latency.Dist != DistNone {
		t.Errorf(`Profile("") = %+v, %v; want the error-free profile`, o, err)
	}
	if o, _ := Profile("realistic"); o.WrongArgument == 0 || o.HTTP429 == 0 || o.Latency.Dist == DistNone {
		t.Errorf("realistic profile has no errors or latency: %+v", o)
	}
	if _, err := Profile("perfect"); err == nil || !strings.Contains(err.Error(), "realistic") {
		t.Errorf("unknown profile: err %v, want one listing the profiles", err)
	}
}

// Retries are counted per rollout (RolloutHeader) and body: two rollouts that send the same
// request (two arms' first requests) each see the statuses they would see alone, whichever
// comes first. Without the header they share one count.
func TestAttemptsCountedPerRollout(t *testing.T) {
	if RolloutHeader != wire.RolloutIDHeader {
		t.Fatalf("the simulator reads %q, the agent sends %q", RolloutHeader, wire.RolloutIDHeader)
	}
	tasks, rows := mustTasks(t, knobRow)
	body, err := json.Marshal(baseRequest(rows[0], 7))
	if err != nil {
		t.Fatal(err)
	}
	send := func(s *Simulator, rollout string) int {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		if rollout != "" {
			req.Header.Set(RolloutHeader, rollout)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec.Code
	}
	fresh := func() *Simulator {
		s, err := New(tasks, Options{HTTP500: 0.5, Seed: 3, Now: fixedNow})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const tries = 12
	alone := fresh()
	var want []int
	for range tries {
		want = append(want, send(alone, "single/tasks.jsonl/0/0"))
	}
	if !slices.Contains(want, http.StatusOK) || !slices.Contains(want, http.StatusInternalServerError) {
		t.Fatalf("statuses %v: want both 200 and 500 at rate 0.5", want)
	}
	// The other arm's identical requests in between do not move this rollout's count.
	mixed := fresh()
	var got []int
	for range tries {
		send(mixed, "multi/tasks.jsonl/0/0")
		got = append(got, send(mixed, "single/tasks.jsonl/0/0"))
	}
	if !slices.Equal(got, want) {
		t.Errorf("interleaved with another rollout: %v, alone: %v", got, want)
	}
	// Without the header the two share a count: the interleaved statuses are every other
	// one of the sequence alone.
	shared, unkeyed := fresh(), fresh()
	var seq, every []int
	for range 2 * tries {
		seq = append(seq, send(unkeyed, ""))
	}
	for i := range tries {
		send(shared, "")
		every = append(every, send(shared, ""))
		if every[i] != seq[2*i+1] {
			t.Errorf("no header, try %d: %d, want %d", i, every[i], seq[2*i+1])
		}
	}
}
