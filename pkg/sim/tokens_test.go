package sim

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/retry"
)

// The runner's loop with token capture against the simulator: every round has prompt and
// generation ids whose counts are the usage counts the same answer reports, log-probs in
// (-4, 0], one per generated id; the same seed gives the same tokens.
func TestCaptureTokensMatchUsage(t *testing.T) {
	tasks, rows := mustTasks(t, recordsRow)
	_, srv := newSim(t, tasks, Options{Seed: 3})
	doer := &retry.Doer{Client: srv.Client(), Policy: retry.Policy{MaxAttempts: 3}}
	cfg := &agent.Config{Model: agent.NewOpenAIModel(srv.URL+"/v1", "", doer), ModelName: "sim",
		CaptureTokens: &agent.TokenCapture{OnNoTokens: func(r string) { t.Errorf("no tokens: %s", r) }}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	run := func() *agent.Trajectory {
		tr := cfg.Run(context.Background(), rows[0], toolsFunc(recordsTool), 5)
		if tr.Termination != agent.Completed || len(tr.Rounds) != 4 {
			t.Fatalf("%s %q, %d rounds", tr.Termination, tr.Error, len(tr.Rounds))
		}
		return tr
	}
	tr := run()
	for _, rd := range tr.Rounds {
		if len(rd.PromptTokenIDs) != rd.Usage.PromptTokens || len(rd.GenerationTokenIDs) != rd.Usage.CompletionTokens ||
			len(rd.GenerationLogProbs) != len(rd.GenerationTokenIDs) || rd.TokenNote != "" {
			t.Errorf("round %d: %d prompt ids (usage %d), %d generation ids (usage %d), %d log-probs, note %q", rd.Index,
				len(rd.PromptTokenIDs), rd.Usage.PromptTokens, len(rd.GenerationTokenIDs), rd.Usage.CompletionTokens, len(rd.GenerationLogProbs), rd.TokenNote)
		}
		for _, lp := range rd.GenerationLogProbs {
			if lp > 0 || lp <= -4 {
				t.Errorf("round %d: log-prob %v outside (-4, 0]", rd.Index, lp)
			}
		}
		for _, id := range slices.Concat(rd.PromptTokenIDs, rd.GenerationTokenIDs) {
			if id < 0 || id >= vocabSize {
				t.Errorf("round %d: id %d outside the vocabulary", rd.Index, id)
			}
		}
	}
	a, _ := json.Marshal(tr.Rounds)
	b, _ := json.Marshal(run().Rounds)
	var ra, rb []struct {
		P []int32   `json:"prompt_token_ids"`
		G []int32   `json:"generation_token_ids"`
		L []float64 `json:"generation_log_probs"`
	}
	json.Unmarshal(a, &ra)
	json.Unmarshal(b, &rb)
	for i := range ra {
		if !slices.Equal(ra[i].P, rb[i].P) || !slices.Equal(ra[i].G, rb[i].G) || !slices.Equal(ra[i].L, rb[i].L) {
			t.Errorf("round %d: tokens differ between two runs of the same seed", i)
		}
	}
}

// The answer's shape per request: ids only with return_token_ids, "token_id:N" tokens only
// with return_tokens_as_token_ids, nothing without logprobs or return_token_ids.
func TestSimTokenShapes(t *testing.T) {
	tasks, rows := mustTasks(t, recordsRow)
	_, srv := newSim(t, tasks, Options{Seed: 3})
	type ans struct {
		Prompt  []int32 `json:"prompt_token_ids"`
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
			Logprobs *struct {
				Content []struct {
					Token string `json:"token"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	for _, tc := range []struct {
		name                 string
		extra                map[string]any
		ids, logprobs, asIDs bool
	}{
		{"none", nil, false, false, false},
		{"logprobs-text", map[string]any{"logprobs": true}, false, true, false},
		{"logprobs-ids", map[string]any{"logprobs": true, "return_tokens_as_token_ids": true}, false, true, true},
		{"all", map[string]any{"logprobs": true, "return_tokens_as_token_ids": true, "return_token_ids": true}, true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := json.Marshal(baseRequest(rows[0], 1))
			var m map[string]any
			json.Unmarshal(b, &m)
			for k, v := range tc.extra {
				m[k] = v
			}
			code, _, raw, cr := post(t, srv.URL, m)
			if code != 200 {
				t.Fatalf("HTTP %d: %s", code, raw)
			}
			var a ans
			if err := json.Unmarshal(raw, &a); err != nil {
				t.Fatal(err)
			}
			ch := a.Choices[0]
			if (a.Prompt != nil) != tc.ids || (ch.TokenIDs != nil) != tc.ids || (ch.Logprobs != nil) != tc.logprobs {
				t.Fatalf("answer %s", raw)
			}
			if tc.ids && (len(a.Prompt) != cr.Usage.PromptTokens || len(ch.TokenIDs) != cr.Usage.CompletionTokens) {
				t.Errorf("ids %d/%d, usage %d/%d", len(a.Prompt), len(ch.TokenIDs), cr.Usage.PromptTokens, cr.Usage.CompletionTokens)
			}
			if tc.logprobs {
				for _, c := range ch.Logprobs.Content {
					if isID := len(c.Token) > 9 && c.Token[:9] == "token_id:"; isID != tc.asIDs {
						t.Errorf("token %q", c.Token)
					}
				}
			}
		})
	}
}
