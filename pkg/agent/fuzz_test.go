package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/dataset"
)

// FuzzChatMessages reads arbitrary bytes as task rows; for every valid row
// the conversions to chat messages and back to a Responses object must not
// panic, and both must marshal.
func FuzzChatMessages(f *testing.F) {
	f.Add([]byte(counterRow(`"temperature":0,"tool_choice":{"type":"function","name":"increment"}`)))
	f.Add([]byte(`{"id":3,"responses_create_params":{"instructions":"sys","input":[{"role":"developer","content":"d"},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]},` +
		`{"type":"function_call","name":"f","arguments":"{}","call_id":"c1"},` +
		`{"type":"function_call_output","call_id":"c1","output":"<b>&</b>"}],"tools":[{"type":"function","name":"f"}]}}`))
	f.Add([]byte(`{"responses_create_params":{"input":"x"}}` + "\n" + `{"responses_create_params":{"input":[]}}`))
	// The first row of each NeMo Gym example file.
	files, _ := filepath.Glob("../../testdata/nemo-gym/*/example.jsonl")
	for _, name := range files {
		if b, err := os.ReadFile(name); err == nil {
			if i := bytes.IndexByte(b, '\n'); i > 0 {
				b = b[:i]
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := dataset.NewReader(bytes.NewReader(data), "fuzz")
		if err != nil {
			return
		}
		r.MaxLineBytes = 1 << 20
		for {
			task, err := r.Next()
			if err == io.EOF || err != nil {
				return
			}
			if task.Err != nil {
				continue
			}
			p := task.Params
			msgs := agent.ChatMessages(p)
			req := openai.ChatCompletionRequest{Model: "m", Messages: msgs, Tools: agent.ChatTools(p.Tools), ToolChoice: agent.ChatToolChoice(p.ToolChoice)}
			if _, err := json.Marshal(req); err != nil {
				t.Fatalf("chat request does not marshal: %v", err)
			}
			// A trajectory that replays the row's calls, plus a final answer.
			tr := &agent.Trajectory{}
			var rd agent.Round
			for _, it := range p.Input {
				switch it.Type {
				case dataset.ItemFunctionCall:
					rd.ToolCalls = append(rd.ToolCalls, agent.ToolCall{CallID: it.CallID, Name: it.Name, Arguments: it.Arguments})
				case dataset.ItemFunctionCallOutput:
					rd.ToolCalls = append(rd.ToolCalls, agent.ToolCall{CallID: it.CallID, Output: it.Output})
				case dataset.ItemMessage:
					rd.Content = it.Content
				}
			}
			tr.Rounds = append(tr.Rounds, rd, agent.Round{Content: "done", FinishReason: "length"})
			resp := agent.BuildResponse("resp_"+task.ID, 1, "m", p, tr)
			b, err := json.Marshal(resp)
			if err != nil {
				t.Fatalf("response does not marshal: %v", err)
			}
			var back map[string]json.RawMessage
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("response is not a JSON object: %v", err)
			}
			if p.ToolsRaw != nil && !bytes.Equal(resp.Tools, p.ToolsRaw) {
				t.Fatalf("tools changed")
			}
			if want := 2*len(rd.ToolCalls) + 1; len(resp.Output) < want {
				t.Fatalf("%d output items, want at least %d", len(resp.Output), want)
			}
		}
	})
}

// recorder is a RoundTripper that answers every request 200 {} and keeps what was sent.
type recorder struct {
	path string
	body []byte
	n    int
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.n++
	r.path = req.URL.Path
	r.body, _ = io.ReadAll(req.Body)
	req.Body.Close()
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("{}")), Header: http.Header{}, Request: req}, nil
}

// FuzzToolArguments sends arbitrary tool names and arguments, as a model may write them,
// through Session.CallTool (the path the loop takes once the name is one the row offers). It
// must never panic; a call that reaches the server goes to base/NAME with a body that is one
// JSON object in valid UTF-8 (the arguments, trimmed, or {} for none); any other call is
// failed with an "Error: ..." output for the model, in valid UTF-8, and sends nothing.
// The seed corpus is in testdata/fuzz/FuzzToolArguments.
func FuzzToolArguments(f *testing.F) {
	f.Add("increment", `{"by": 2}`)
	f.Fuzz(func(t *testing.T, name, arguments string) {
		rec := &recorder{}
		ts, err := agent.NewToolServer("fuzz", "http://127.0.0.1:1/base", rec)
		if err != nil {
			t.Fatal(err)
		}
		res := ts.NewSession().CallTool(context.Background(), name, arguments)
		if rec.n == 0 {
			if !res.Failed || !strings.HasPrefix(res.Output, "Error: ") || res.Unreachable {
				t.Fatalf("not sent, but result %+v", res)
			}
			if !utf8.ValidString(res.Output) {
				t.Fatalf("error output is not valid UTF-8: %q", res.Output)
			}
			return
		}
		if rec.n != 1 || rec.path != "/base/"+name || res.Failed || res.Output != "{}" {
			t.Fatalf("sent %d requests to %q for name %q; result %+v", rec.n, rec.path, name, res)
		}
		body := rec.body
		if !utf8.Valid(body) || !json.Valid(body) || len(body) == 0 || body[0] != '{' {
			t.Fatalf("sent a body that is not one JSON object: %q (arguments %q)", body, arguments)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(body, &obj); err != nil {
			t.Fatalf("sent %q: %v", body, err)
		}
		if want := strings.TrimSpace(arguments); want != "" && string(body) != want {
			t.Fatalf("sent %q for arguments %q", body, arguments)
		}
	})
}
