// Package replay serves recorded NeMo Gym rollouts as an OpenAI-compatible
// Chat Completions endpoint: for a task whose input matches a recorded
// rollout, each model call answers with that rollout's next round (its
// function calls, then its final message). It is not a model: it replays
// what a model once did, so that a run against resource servers can be
// checked against the rewards NeMo Gym recorded.
package replay

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/pkg/dataset"
)

// Round is what one model call answers.
type Round struct {
	Content   string
	ToolCalls []ToolCall
}

// ToolCall is a recorded function call.
type ToolCall struct {
	CallID, Name, Arguments string
}

// Handler is the replay endpoint.
type Handler struct {
	byKey map[string][]Round
}

// Load reads every NeMo Gym rollout file matching glob.
func Load(glob string) (*Handler, error) {
	files, err := filepath.Glob(glob)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no file matches %q", glob)
	}
	h := &Handler{byKey: map[string][]Round{}}
	for _, f := range files {
		if err := h.addFile(f); err != nil {
			return nil, err
		}
	}
	return h, nil
}

type record struct {
	Response struct {
		Output []struct {
			Type      string `json:"type"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
			CallID    string `json:"call_id"`
			Content   []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
	} `json:"response"`
}

func (h *Handler) addFile(path string) error {
	return dataset.ReadFile(path, func(t *dataset.Task) error {
		if t.Err != nil {
			return t.Err
		}
		var rec record
		if err := json.Unmarshal(t.Raw, &rec); err != nil {
			return fmt.Errorf("%s:%d: response: %v", t.File, t.Line, err)
		}
		if len(rec.Response.Output) == 0 {
			return fmt.Errorf("%s:%d: response.output: missing; a replay file holds NeMo Gym rollout records", t.File, t.Line)
		}
		h.byKey[key(t.Params)] = splitRounds(rec)
		return nil
	})
}

// splitRounds regroups the output as rounds: a round is a run of
// function_call items (answered by the outputs that follow), or a message.
func splitRounds(rec record) []Round {
	var rounds []Round
	open := false // the last round still takes function calls
	for _, it := range rec.Response.Output {
		switch it.Type {
		case "function_call":
			if !open {
				rounds = append(rounds, Round{})
				open = true
			}
			r := &rounds[len(rounds)-1]
			r.ToolCalls = append(r.ToolCalls, ToolCall{CallID: it.CallID, Name: it.Name, Arguments: it.Arguments})
		case "function_call_output":
			open = false
		case "message":
			var text strings.Builder
			for _, c := range it.Content {
				text.WriteString(c.Text)
			}
			rounds = append(rounds, Round{Content: text.String()})
			open = false
		}
	}
	return rounds
}

// key identifies a task by the text of its non-assistant messages.
func key(p *dataset.Params) string {
	var b strings.Builder
	if p.Instructions != "" {
		b.WriteByte(0)
		b.WriteString(p.Instructions)
	}
	for _, it := range p.Input {
		if it.Type == dataset.ItemMessage && it.Role != "assistant" {
			b.WriteByte(0)
			b.WriteString(it.Content)
		}
	}
	return b.String()
}

type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

// ServeHTTP answers POST .../chat/completions.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		writeError(w, http.StatusNotFound, "replay serves POST /v1/chat/completions only")
		return
	}
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad request: "+err.Error())
		return
	}
	// The key of the request: its system and user messages are the task's
	// instructions and input messages, converted.
	var b strings.Builder
	assistant := 0
	for _, m := range req.Messages {
		switch m.Role {
		case "assistant":
			assistant++
		case "tool":
		default:
			b.WriteByte(0)
			b.WriteString(m.Content)
		}
	}
	rounds, ok := h.byKey[b.String()]
	if !ok {
		writeError(w, http.StatusNotFound, "replay: no recorded rollout has this task's messages")
		return
	}
	if assistant >= len(rounds) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("replay: the recorded rollout has %d rounds; this is call %d", len(rounds), assistant+1))
		return
	}
	rd := rounds[assistant]
	msg := map[string]any{"role": "assistant", "content": rd.Content}
	finish := "stop"
	if len(rd.ToolCalls) > 0 {
		finish = "tool_calls"
		var calls []map[string]any
		for _, c := range rd.ToolCalls {
			calls = append(calls, map[string]any{"id": c.CallID, "type": "function",
				"function": map[string]string{"name": c.Name, "arguments": c.Arguments}})
		}
		msg["tool_calls"] = calls
	}
	prompt := 0
	for _, m := range req.Messages {
		prompt += len(m.Content) / 4
	}
	completion := len(rd.Content) / 4
	for _, c := range rd.ToolCalls {
		completion += (len(c.Name) + len(c.Arguments)) / 4
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": fmt.Sprintf("chatcmpl-replay-%d", time.Now().UnixNano()), "object": "chat.completion",
		"created": time.Now().Unix(), "model": req.Model,
		"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": finish}},
		// Token counts are estimates (4 bytes a token): nothing was generated.
		"usage": map[string]int{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
	})
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error"}})
}
