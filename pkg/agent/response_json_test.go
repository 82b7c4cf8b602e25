package agent_test

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/rollout-dev/rollout/pkg/agent"
)

// sameResponseJSON checks that MarshalJSON and json.Marshal give encoding/json's encoding by
// reflection, byte for byte (or its failure).
func sameResponseJSON(t *testing.T, r *agent.Response) {
	t.Helper()
	want, werr := agent.PlainResponseJSON(r)
	got, err := r.MarshalJSON()
	if (err != nil) != (werr != nil) {
		t.Fatalf("MarshalJSON error %v, encoding/json's %v", err, werr)
	}
	if werr != nil {
		return
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("MarshalJSON differs from encoding/json:\n got %s\nwant %s", got, want)
	}
	if via, err := json.Marshal(r); err != nil || !bytes.Equal(via, want) {
		t.Fatalf("json.Marshal differs (%v):\n got %s\nwant %s", err, via, want)
	}
}

func TestResponseJSONIsEncodingJSONs(t *testing.T) {
	for _, row := range []string{benchRow, nemoRow(t), counterRow("")} {
		task, tr := conversation(t, row, 2)
		recordRound(tr, 2, benchAnswer(2))
		tr.Rounds[0].Reasoning = "thinking <hard> & long"
		r := agent.BuildResponse("resp_1", 1764200000, "m", task.Params, tr)
		sameResponseJSON(t, r)
	}
	task, tr := conversation(t, benchRow, 1)
	for _, s := range nasty {
		r := agent.BuildResponse(s, 1.5, s, task.Params, tr)
		r.Instructions, r.Status, r.Object = &s, s, s
		r.IncompleteDetails = &agent.IncompleteReason{Reason: s}
		r.Output = append(r.Output, agent.OutputItem{Type: s, ID: s, Status: s, Role: s, CallID: s, Name: s, Arguments: &s, Output: &s,
			Content: []agent.OutputText{{Type: s, Text: s, Annotations: []any{}}}, Summary: []agent.SummaryText{{Type: s, Text: s}}})
		sameResponseJSON(t, r)
	}
	temp, n := 0.0, 7
	for _, edit := range []func(r *agent.Response){
		func(r *agent.Response) { r.Error = map[string]string{"code": "x"} },
		func(r *agent.Response) {
			r.Output[0].Content = []agent.OutputText{{Text: "a", Annotations: []any{"<x>"}}}
		},
		func(r *agent.Response) { r.Output[0].Content = []agent.OutputText{{Text: "a"}} },
		func(r *agent.Response) { r.Tools, r.ToolChoice = nil, nil },
		func(r *agent.Response) { r.Tools = json.RawMessage("[ {\"a\": \"<&>\u2028\"} ]") },
		func(r *agent.Response) { r.Tools = json.RawMessage(`[`) },
		func(r *agent.Response) { r.ToolChoice = json.RawMessage{} },
		func(r *agent.Response) { r.CreatedAt = math.NaN() },
		func(r *agent.Response) { r.CreatedAt = 1e21 },
		func(r *agent.Response) { r.Temperature, r.TopP, r.MaxOutputTokens = &temp, &temp, &n },
		func(r *agent.Response) { inf := math.Inf(1); r.TopP = &inf },
		func(r *agent.Response) { r.Output = nil },
		func(r *agent.Response) {
			r.Usage.InputTokens, r.Usage.InputTokensDetails.CachedTokens, r.Usage.TotalTokens = 5, -1, 9
		},
	} {
		r := agent.BuildResponse("resp_1", 1764200000, "m", task.Params, tr)
		r.Output = append(r.Output, agent.OutputItem{Type: "message", Content: []agent.OutputText{{Text: "x", Annotations: []any{}}}})
		edit(r)
		sameResponseJSON(t, r)
	}
}
