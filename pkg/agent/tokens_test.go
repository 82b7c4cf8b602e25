package agent_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rollout-dev/rollout/pkg/agent"
)

// raw answers with a body as it is.
func raw(body string) step {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}
}

// withTokens is completionJSON's final answer with members added to the answer (top) and
// to its choice (choice), as JSON text without braces.
func withTokens(top, choice string) string {
	s := completionJSON("done", 7, 3)
	s = strings.Replace(s, `"finish_reason":"stop"`, `"finish_reason":"stop"`+choice, 1)
	return strings.Replace(s, `{"choices"`, `{`+top+`"choices"`, 1)
}

// --capture-tokens asks as vLLM wants and reads each shape of answer: newer vLLM (ids at the
// top and in the choice), older vLLM ("token_id:N" logprobs only: prompt ids missing, said
// so), OpenAI (text tokens: no ids, a warning), a server that ignores everything.
func TestCaptureTokensShapes(t *testing.T) {
	logprobs := `,"logprobs":{"content":[{"token":"token_id:11","logprob":-0.5,"bytes":null,"top_logprobs":[]},{"token":"token_id:12","logprob":0,"top_logprobs":[]},{"token":"token_id:13","logprob":-2.25,"top_logprobs":[]}]}`
	textLogprobs := `,"logprobs":{"content":[{"token":"do","logprob":-0.5},{"token":"ne","logprob":-1}]}`
	for _, tc := range []struct {
		name        string
		body        string
		prompt, gen []int32
		logProbs    []float64
		note        string // a substring of the round's note; "" for none
		warned      bool
	}{
		{"vllm-return-token-ids", withTokens(`"prompt_token_ids":[1,2,3,4,5,6,7],`, `,"token_ids":[11,12,13]`+logprobs),
			[]int32{1, 2, 3, 4, 5, 6, 7}, []int32{11, 12, 13}, []float64{-0.5, 0, -2.25}, "", false},
		{"vllm-older", withTokens("", logprobs),
			nil, []int32{11, 12, 13}, []float64{-0.5, 0, -2.25}, "no prompt_token_ids", false},
		{"openai-text-tokens", withTokens("", textLogprobs),
			nil, nil, []float64{-0.5, -1}, "without token ids", true},
		{"ignores-options", completionJSON("done", 7, 3),
			nil, nil, nil, "returned no token ids or log-probs", true},
		{"llama-server-ids", withTokens("", `,"logprobs":{"content":[{"id":11,"token":"do","bytes":[100,111],"logprob":-0.5,"top_logprobs":[]},{"id":151645,"token":"","bytes":[],"logprob":-1,"top_logprobs":[]}]}`),
			nil, []int32{11, 151645}, []float64{-0.5, -1}, "no prompt_token_ids", false},
		{"ids-and-logprobs-disagree", withTokens(`"prompt_token_ids":[1],`, `,"token_ids":[11,12]`+logprobs),
			[]int32{1}, []int32{11, 12}, []float64{-0.5, 0, -2.25}, "2 generation token ids but 3 log-probs", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeModel(t, nil, raw(tc.body))
			c := m.config(nil)
			var mu sync.Mutex
			var warnings []string
			c.CaptureTokens = &agent.TokenCapture{OnNoTokens: func(reason string) { mu.Lock(); warnings = append(warnings, reason); mu.Unlock() }}
			task := parseTask(t, counterRow(""))
			tr := c.Run(context.Background(), task, newFakeResource(t, nil).session(t, task), 1)
			if tr.Termination != agent.Completed || len(tr.Rounds) != 1 {
				t.Fatalf("termination %q (%s), %d rounds: capture must not fail a rollout", tr.Termination, tr.Error, len(tr.Rounds))
			}
			req := m.rawBody(0)
			for k, want := range map[string]string{"logprobs": "true", "top_logprobs": "1", "return_tokens_as_token_ids": "true", "return_token_ids": "true"} {
				if string(req[k]) != want {
					t.Errorf("request %s = %s, want %s", k, req[k], want)
				}
			}
			rd := tr.Rounds[0]
			if !slices.Equal(rd.PromptTokenIDs, tc.prompt) || !slices.Equal(rd.GenerationTokenIDs, tc.gen) || !slices.Equal(rd.GenerationLogProbs, tc.logProbs) {
				t.Errorf("tokens: prompt %v gen %v logprobs %v; want %v %v %v", rd.PromptTokenIDs, rd.GenerationTokenIDs, rd.GenerationLogProbs, tc.prompt, tc.gen, tc.logProbs)
			}
			if (tc.note == "") != (rd.TokenNote == "") || !strings.Contains(rd.TokenNote, tc.note) {
				t.Errorf("note %q, want one with %q", rd.TokenNote, tc.note)
			}
			if (len(warnings) > 0) != tc.warned {
				t.Errorf("warnings %q, want some: %v", warnings, tc.warned)
			}
			// The trajectory keeps the tokens under NeMo Gym's names, and the fast encoder
			// writes what encoding/json writes.
			sameJSON(t, tr)
			b, _ := tr.MarshalJSON()
			var back struct {
				Rounds []struct {
					Prompt []int32   `json:"prompt_token_ids"`
					Gen    []int32   `json:"generation_token_ids"`
					LP     []float64 `json:"generation_log_probs"`
				} `json:"rounds"`
			}
			if err := json.Unmarshal(b, &back); err != nil || !slices.Equal(back.Rounds[0].Gen, tc.gen) || !slices.Equal(back.Rounds[0].LP, tc.logProbs) || !slices.Equal(back.Rounds[0].Prompt, tc.prompt) {
				t.Errorf("trajectory JSON %s (%v)", b, err)
			}
		})
	}
}

// Without --capture-tokens nothing is asked and nothing kept, though the endpoint sends ids.
func TestNoCaptureAsksNothing(t *testing.T) {
	m := newFakeModel(t, nil, raw(withTokens(`"prompt_token_ids":[1],`, `,"token_ids":[11]`)))
	task := parseTask(t, counterRow(""))
	tr := m.config(nil).Run(context.Background(), task, newFakeResource(t, nil).session(t, task), 1)
	req := m.rawBody(0)
	for _, k := range []string{"logprobs", "top_logprobs", "return_tokens_as_token_ids", "return_token_ids"} {
		if _, ok := req[k]; ok {
			t.Errorf("request has %s without capture", k)
		}
	}
	if rd := tr.Rounds[0]; rd.GenerationTokenIDs != nil || rd.PromptTokenIDs != nil || rd.TokenNote != "" {
		t.Errorf("round kept tokens without capture: %+v", rd)
	}
}

// OpenAI refuses vLLM's options with a 400: the call is made again with logprobs only, and so
// are all later calls of the run (one refusal in all); the rollout completes, its rounds keep
// the log-probs without ids, and the warning names the refusal.
func TestCaptureTokensRefusedOptions(t *testing.T) {
	textLogprobs := `,"logprobs":{"content":[{"token":"do","logprob":-0.5},{"token":"ne","logprob":-1}]}`
	refused := 0
	var mu sync.Mutex
	var m *fakeModel
	openai := func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		body := m.bodies[len(m.bodies)-1] // serve read it
		m.mu.Unlock()
		if strings.Contains(string(body), "return_token_ids") {
			mu.Lock()
			refused++
			mu.Unlock()
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error": {"message": "Unrecognized request argument supplied: return_tokens_as_token_ids", "type": "invalid_request_error", "param": null, "code": null}}`)
			return
		}
		if !strings.Contains(string(body), `"logprobs":true`) {
			http.Error(w, "no logprobs asked", http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(string(body), `"role":"tool"`) {
			io.WriteString(w, withTokens("", textLogprobs))
			return
		}
		s := completionJSON("", 7, 3, call{"c1", "increment", `{"by": 1}`})
		io.WriteString(w, strings.Replace(s, `"finish_reason":"tool_calls"`, `"finish_reason":"tool_calls"`+textLogprobs, 1))
	}
	m = newFakeModel(t, nil, openai)
	c := m.config(nil)
	var warnings []string
	c.CaptureTokens = &agent.TokenCapture{OnNoTokens: func(reason string) { mu.Lock(); warnings = append(warnings, reason); mu.Unlock() }}
	task := parseTask(t, counterRow(""))
	for range 2 {
		tr := c.Run(context.Background(), task, newFakeResource(t, nil).session(t, task), 1)
		if tr.Termination != agent.Completed || len(tr.Rounds) != 2 {
			t.Fatalf("termination %q (%s), %d rounds", tr.Termination, tr.Error, len(tr.Rounds))
		}
		for _, rd := range tr.Rounds {
			if rd.GenerationTokenIDs != nil || !slices.Equal(rd.GenerationLogProbs, []float64{-0.5, -1}) || !strings.Contains(rd.TokenNote, "without token ids") {
				t.Errorf("round %d: %+v", rd.Index, rd)
			}
		}
	}
	if refused != 1 || m.calls() != 5 {
		t.Errorf("%d refusals and %d calls, want 1 and 5 (the refused one, then four)", refused, m.calls())
	}
	if len(warnings) == 0 || !strings.Contains(warnings[0], "refuses return_token_ids") || !strings.Contains(warnings[0], "Unrecognized request argument") {
		t.Errorf("warnings %q", warnings)
	}
}

// llama-server: the answer's log-probs carry each token's id and no prompt ids; the prompt ids
// are the server's /tokenize of its /apply-template rendering of the request as sent, kept when
// their count is the answer's usage.prompt_tokens, and a note says why otherwise.
func TestCaptureTokensLlamaPromptIDs(t *testing.T) {
	answer := withTokens("", `,"logprobs":{"content":[{"id":11,"token":"do","logprob":-0.5,"top_logprobs":[]},{"id":12,"token":"ne","logprob":-1,"top_logprobs":[]},{"id":151645,"token":"","logprob":-0.1,"top_logprobs":[]}]}`)
	for _, tc := range []struct {
		name   string
		tokens string
		prompt []int32
		note   string
	}{
		{"counts-agree", `[1,2,3,4,5,6,7]`, []int32{1, 2, 3, 4, 5, 6, 7}, ""},
		{"counts-differ", `[1,2,3]`, nil, "gives 3 prompt ids, its answer counted 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeModel(t, nil, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch r.URL.Path {
				case "/apply-template":
					io.WriteString(w, `{"prompt":"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"}`)
				case "/tokenize":
					io.WriteString(w, `{"tokens":`+tc.tokens+`}`)
				default:
					io.WriteString(w, answer)
				}
			})
			c := m.config(nil)
			c.CaptureTokens = &agent.TokenCapture{}
			task := parseTask(t, counterRow(""))
			tr := c.Run(context.Background(), task, newFakeResource(t, nil).session(t, task), 1)
			rd := tr.Rounds[0]
			if !slices.Equal(rd.GenerationTokenIDs, []int32{11, 12, 151645}) || !slices.Equal(rd.PromptTokenIDs, tc.prompt) ||
				(tc.note == "") != (rd.TokenNote == "") || !strings.Contains(rd.TokenNote, tc.note) {
				t.Fatalf("prompt %v gen %v note %q; want prompt %v, note with %q", rd.PromptTokenIDs, rd.GenerationTokenIDs, rd.TokenNote, tc.prompt, tc.note)
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			if len(m.paths) != 3 || m.paths[1] != "POST /apply-template" || m.paths[2] != "POST /tokenize" || string(m.bodies[1]) != string(m.bodies[0]) {
				t.Errorf("requests %v; /apply-template got %s, the chat request was %s", m.paths, m.bodies[1], m.bodies[0])
			}
		})
	}
}
