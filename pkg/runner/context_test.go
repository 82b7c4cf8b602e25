package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/toolclient"
	"github.com/rollout-dev/rollout/pkg/wire"
)

// vllmModel is a Chat Completions endpoint with a context of limit bytes of messages: a request
// over it is answered as vLLM answers one over the model's maximum context length (HTTP 400,
// its top-level error object; the wording of vllm-project/vllm issues #20409 and #19464).
// Under it, the model calls "note" once a round, counting its rounds by its own call ids (so
// that a window that drops old rounds does not confuse it), then answers after rounds rounds.
// It counts the requests of each rollout by their X-Rollout-Id header.
type vllmModel struct {
	limit, rounds int
	mu            sync.Mutex
	requests      map[string]int
	overflows     map[string]int
}

func (m *vllmModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Messages []struct {
			Role      string `json:"role"`
			ToolCalls []struct {
				ID string `json:"id"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal(body, &raw) != nil || json.Unmarshal(body, &req) != nil {
		http.Error(w, "bad request", 400)
		return
	}
	id := r.Header.Get(wire.RolloutIDHeader)
	m.mu.Lock()
	m.requests[id]++
	m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if n := len(raw["messages"]); n > m.limit {
		m.mu.Lock()
		m.overflows[id]++
		m.mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"object": "error", "message": "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, 0 in the completion). Please reduce the length of the messages or completion.", "type": "BadRequestError", "param": null, "code": 400}`, m.limit/4, n/4, n/4)
		return
	}
	done := 0
	for _, msg := range req.Messages {
		for _, tc := range msg.ToolCalls {
			var k int
			if _, err := fmt.Sscanf(tc.ID, "note%d", &k); err == nil {
				done = max(done, k+1)
			}
		}
	}
	msg := map[string]any{"role": "assistant", "content": "noted everything"}
	finish := "stop"
	if done < m.rounds {
		msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": fmt.Sprintf("note%d", done), "type": "function",
			"function": map[string]any{"name": "note", "arguments": `{}`}}}}
		finish = "tool_calls"
	}
	json.NewEncoder(w).Encode(map[string]any{"id": "x", "object": "chat.completion", "model": "m",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]int{"prompt_tokens": len(raw["messages"]) / 4, "completion_tokens": 3, "total_tokens": len(raw["messages"])/4 + 3}})
}

// noteServer answers every note with 600 bytes, and verifies with the number of notes taken
// (out of 6) as the reward.
type noteServer struct {
	mu    sync.Mutex
	notes map[string]int
	next  int
}

func (s *noteServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.URL.Path {
	case "/seed_session":
		s.next++
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: fmt.Sprint(s.next)})
		io.WriteString(w, "{}")
	case "/note":
		c, _ := r.Cookie("sid")
		s.notes[c.Value]++
		fmt.Fprintf(w, `{"noted":"%s"}`, strings.Repeat("n", 586))
	case "/verify":
		c, _ := r.Cookie("sid")
		fmt.Fprintf(w, `{"reward": %g}`, float64(s.notes[c.Value])/6)
	default:
		http.NotFound(w, r)
	}
}

// context_length is a result: recorded, scored with the verifier's reward and not retried (a
// retrying client), against an endpoint that answers as vLLM does. The window arm, shown less,
// stays under the endpoint's context and completes; the records say which strategy hit it.
func TestContextLengthIsScoredPerStrategy(t *testing.T) {
	vm := &vllmModel{limit: 2500, rounds: 6, requests: map[string]int{}, overflows: map[string]int{}}
	model := httptest.NewServer(vm)
	defer model.Close()
	server := httptest.NewServer(&noteServer{notes: map[string]int{}})
	defer server.Close()

	tr := NewTransport(4)
	srv, err := toolclient.New("notes", server.URL, tr)
	if err != nil {
		t.Fatal(err)
	}
	doer := &retry.Doer{Client: &http.Client{Transport: tr}, Policy: retry.Policy{MaxAttempts: 4}}
	o := Options{Input: writeRows(t, 3), Concurrency: 4, Repeats: 1, Servers: Servers{Default: srv},
		Agent: agent.Config{Model: agent.NewOpenAIModel(model.URL+"/v1", "", doer), ModelName: "m"},
		Arms: []Arm{
			{Name: "full", Policy: agent.PolicyMulti, Context: agent.ContextStrategy{Kind: agent.ContextFull}},
			{Name: "window", Policy: agent.PolicyMulti, Context: agent.ContextStrategy{Kind: agent.ContextWindow, N: 1}},
		}}
	out := &memOutput{}
	rep, err := Run(context.Background(), o, []Output{out})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.res) != 6 {
		t.Fatalf("%d records", len(out.res))
	}
	for _, res := range out.res {
		r := res.Record
		switch r.Arm {
		case "full":
			if r.Termination != string(agent.ContextLength) || r.FailureClass != "" || !r.HasReward || r.Context != "full" {
				t.Errorf("full: termination %q class %q has reward %v context %q (%s)", r.Termination, r.FailureClass, r.HasReward, r.Context, r.Error)
			}
			// Four notes fit (each round adds ~690 bytes); the fifth request is over.
			if r.Reward != 4.0/6 || r.Rounds != 4 || !strings.Contains(r.Error, "maximum context length") {
				t.Errorf("full: reward %v rounds %d error %q", r.Reward, r.Rounds, r.Error)
			}
			if r.ContextRemovedMessages != 0 || r.ContextTokensMax == 0 {
				t.Errorf("full: removed %d messages, max context %d tokens", r.ContextRemovedMessages, r.ContextTokensMax)
			}
			// The model's usage counts a token per 4 bytes of messages: each round's prompt
			// grows; the largest is the last.
			if len(r.ContextTokens) != 4 || r.ContextTokens[3] != r.ContextTokensMax || r.ContextTokens[0] >= r.ContextTokens[1] || r.ContextTokens[2] >= r.ContextTokens[3] {
				t.Errorf("full: context tokens per round %v, max %d", r.ContextTokens, r.ContextTokensMax)
			}
		case "window":
			if r.Termination != string(agent.Completed) || r.Reward != 1 || r.Context != "window:1" || r.Rounds != 7 {
				t.Errorf("window: termination %q reward %v context %q rounds %d (%s)", r.Termination, r.Reward, r.Context, r.Rounds, r.Error)
			}
			if r.ContextRemovedMessages == 0 || r.ContextRemovedBytes == 0 || r.ContextTokensMax == 0 || r.ContextTokensMax > int64(vm.limit/4) {
				t.Errorf("window: removed %d messages %d bytes, max context %d tokens", r.ContextRemovedMessages, r.ContextRemovedBytes, r.ContextTokensMax)
			}
			// From the third round on, a window of one round sends the same size.
			if len(r.ContextTokens) != 7 || r.ContextTokens[2] != r.ContextTokens[5] {
				t.Errorf("window: context tokens per round %v", r.ContextTokens)
			}
		default:
			t.Errorf("arm %q", r.Arm)
		}
	}
	vm.mu.Lock()
	for id, n := range vm.overflows {
		if n != 1 {
			t.Errorf("rollout %s: the overflow was sent %d times (retried)", id, n)
		}
		if !strings.HasPrefix(id, "full/") {
			t.Errorf("rollout %s overflowed", id)
		}
	}
	if len(vm.overflows) != 3 {
		t.Errorf("%d rollouts overflowed, want the 3 of arm full", len(vm.overflows))
	}
	vm.mu.Unlock()
	if rep.Summary.Scored != 6 || rep.Summary.Terminations[string(agent.ContextLength)] != 3 {
		t.Errorf("summary: scored %d terminations %v", rep.Summary.Scored, rep.Summary.Terminations)
	}
}
