package agent_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

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
