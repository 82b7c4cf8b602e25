package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	openai "github.com/sashabaranov/go-openai"
)

// Token capture (Config.CaptureTokens): each model call asks the endpoint for what training
// needs, as vLLM's OpenAI-compatible server takes it, and the round keeps it under NeMo Gym's
// names (Round.PromptTokenIDs, GenerationTokenIDs, GenerationLogProbs).
//
// The request gets "logprobs": true and "top_logprobs": 1 (the sampled token's log-probability
// and one alternative: llama.cpp's llama-server returns no log-probs at all for 0, which it
// takes as n_probs 0), "return_tokens_as_token_ids": true (vLLM then writes each logprobs token
// as "token_id:N" instead of its text, which two ids may share) and "return_token_ids": true
// (newer vLLM then adds "prompt_token_ids" at the top level of the answer and "token_ids" to
// each choice). The answer is read in each shape:
//   - choices[0].token_ids present: the generation's ids; else each logprobs token's "id"
//     (llama-server's answer); else the ids of the "token_id:N" logprobs tokens (vLLM without
//     return_token_ids); else none.
//   - choices[0].logprobs.content[].logprob: the generation's log-probabilities.
//   - prompt_token_ids: the prompt's ids; missing on vLLM without return_token_ids, and then
//     the round says so in TokenNote rather than inventing them.
//
// An endpoint that refuses vLLM's options (OpenAI's: 400 "Unrecognized request argument") is
// asked again, and from then on, for log-probs only. One that returns no generation ids
// (OpenAI's: log-probs of text tokens at most) leaves the round without them, with a note,
// and TokenCapture.OnNoTokens is called; the rollout goes on.

// TokenCapture turns token capture on (Config.CaptureTokens); one is shared by all the
// rollouts of a run.
type TokenCapture struct {
	// OnNoTokens, when set, is called with the reason each time a call comes back without
	// generation ids (the caller warns once).
	OnNoTokens func(reason string)
	// plain is set once the endpoint refused vLLM's options: calls ask for log-probs only.
	plain atomic.Bool
	// llamaSeen is set once an answer carried llama-server's per-token ids: later calls take
	// the token-in path (llamatokens.go), with what llama holds of the server.
	llamaSeen atomic.Bool
	llama     llamaState
}

// refused records that the endpoint refused vLLM's options.
func (tc *TokenCapture) refused(err error) {
	tc.plain.Store(true)
	if tc.OnNoTokens != nil {
		tc.OnNoTokens(fmt.Sprintf("the endpoint refuses return_token_ids and return_tokens_as_token_ids (%s)", errText(err)))
	}
}

// refusesTokenOptions reports whether a failed call is the endpoint refusing vLLM's options:
// OpenAI answers 400 "Unrecognized request argument supplied: return_tokens_as_token_ids".
func refusesTokenOptions(err error) bool {
	e, ok := endpointErrorOf(err)
	if !ok || e.Status != 400 {
		return false
	}
	m := strings.ToLower(e.Message)
	return strings.Contains(m, "return_token") || strings.Contains(m, "unrecognized request argument")
}

// Members askTokens adds at the start of a request's JSON object: OpenAI's, and vLLM's.
const (
	logprobFields = `"logprobs":true,"top_logprobs":1`
	vllmFields    = `,"return_tokens_as_token_ids":true,"return_token_ids":true`
)

// askTokens is the request body with logprobFields (and vllmFields when vllm) added: body is
// the JSON object go-openai wrote, which never has these members (the request struct's
// LogProbs is left unset).
func askTokens(body []byte, vllm bool) []byte {
	fields := logprobFields
	if vllm {
		fields += vllmFields
	}
	i := strings.IndexByte(string(body), '{')
	if i < 0 {
		return body
	}
	rest := body[i+1:]
	out := make([]byte, 0, len(body)+len(fields)+1)
	out = append(out, body[:i+1]...)
	out = append(out, fields...)
	if j := strings.IndexFunc(string(rest), func(r rune) bool { return r != ' ' && r != '\n' && r != '\t' && r != '\r' }); j >= 0 && rest[j] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...)
}

// tokenAnswer is the part of a chat completion that carries tokens.
type tokenAnswer struct {
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
	Choices        []struct {
		TokenIDs []int32 `json:"token_ids"`
		Logprobs *struct {
			Content []struct {
				ID      *int32  `json:"id"` // llama-server's
				Token   string  `json:"token"`
				Logprob float64 `json:"logprob"`
			} `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
}

// Notes of a round whose tokens are not all there.
const (
	noteNoTokens       = "the endpoint returned no token ids or log-probs (it ignores logprobs and return_token_ids)"
	noteNoPromptIDs    = "the endpoint returned no prompt_token_ids (vLLM before return_token_ids): prompt ids missing"
	noteNoGenerationID = "the endpoint returned log-probs without token ids (logprobs tokens are not \"token_id:N\"): generation ids missing"
)

// tokensOf reads the round's tokens from the model's answer body. It reports false when the
// answer has no generation ids (none at all, or log-probs of text tokens only, as OpenAI's).
func tokensOf(rd *Round, body []byte) (ok, llama bool) {
	var a tokenAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		rd.TokenNote = fmt.Sprintf("the answer's tokens could not be read: %v", err)
		return false, false
	}
	rd.PromptTokenIDs = a.PromptTokenIDs
	if len(a.Choices) == 0 {
		rd.TokenNote = noteNoTokens
		return false, false
	}
	ch := &a.Choices[0]
	var notes []string
	if ch.Logprobs != nil {
		rd.GenerationLogProbs = make([]float64, len(ch.Logprobs.Content))
		for i, t := range ch.Logprobs.Content {
			rd.GenerationLogProbs[i] = t.Logprob
		}
	}
	switch {
	case ch.TokenIDs != nil:
		rd.GenerationTokenIDs = ch.TokenIDs
	case ch.Logprobs != nil:
		ids := make([]int32, 0, len(ch.Logprobs.Content))
		for _, t := range ch.Logprobs.Content {
			if t.ID != nil {
				ids = append(ids, *t.ID)
				llama = true
				continue
			}
			n, ok := strings.CutPrefix(t.Token, "token_id:")
			id, err := strconv.ParseInt(n, 10, 32)
			if !ok || err != nil {
				ids = nil
				break
			}
			ids = append(ids, int32(id))
		}
		rd.GenerationTokenIDs = ids
		if ids == nil && len(ch.Logprobs.Content) > 0 {
			notes = append(notes, noteNoGenerationID)
		}
	}
	if rd.PromptTokenIDs == nil && rd.GenerationTokenIDs == nil && rd.GenerationLogProbs == nil {
		rd.TokenNote = noteNoTokens
		return false, false
	}
	if rd.GenerationTokenIDs == nil && len(notes) == 0 {
		notes = append(notes, noteNoGenerationID)
	}
	if rd.PromptTokenIDs == nil {
		notes = append(notes, noteNoPromptIDs)
	}
	if rd.GenerationTokenIDs != nil && rd.GenerationLogProbs != nil && len(rd.GenerationTokenIDs) != len(rd.GenerationLogProbs) {
		notes = append(notes, fmt.Sprintf("%d generation token ids but %d log-probs", len(rd.GenerationTokenIDs), len(rd.GenerationLogProbs)))
	}
	rd.TokenNote = strings.Join(notes, "; ")
	return rd.GenerationTokenIDs != nil, llama
}

// captureTokens adds the call's tokens to its round when the run captures them.
func (c *Config) captureTokens(ctx context.Context, rd *Round, tap *answerTap) {
	tc := c.CaptureTokens
	if tc == nil || tap == nil {
		return
	}
	ok, llama := tokensOf(rd, tap.body)
	switch {
	case tap.tokenNote != "" && !ok:
		rd.TokenNote = tap.tokenNote // the token-in path's reason (llamatokens.go)
	case tap.tokenNote != "" && rd.TokenNote != "":
		rd.TokenNote += "; " + tap.tokenNote
	case tap.tokenNote != "":
		rd.TokenNote = tap.tokenNote
	}
	if !ok && tc.OnNoTokens != nil {
		tc.OnNoTokens(rd.TokenNote)
	}
	if llama {
		tc.llamaSeen.Store(true)
	}
	if llama && rd.PromptTokenIDs == nil && tap.url != nil {
		llamaPromptIDs(ctx, rd, tap)
	}
	tap.body, tap.request, tap.do = nil, nil, nil
}

// llamaPromptIDs gives a llama-server call the prompt ids its chat endpoint does not return:
// the server's own rendering of the request (POST /apply-template, the chat template the chat
// endpoint applies) tokenized by the server (POST /tokenize, special tokens parsed and added,
// as the chat endpoint tokenizes), NeMo Gym's way for a server without return_token_ids (its
// vLLM model server calls /tokenize). The count must be the answer's usage.prompt_tokens, or
// the ids are not kept and the note says so. The calls go through the doer the chat call went
// through (its retries, and a pool's routing to the rollout's endpoint), within
// llamaHelperTimeout.
func llamaPromptIDs(ctx context.Context, rd *Round, tap *answerTap) {
	if tap.do == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, llamaHelperTimeout)
	defer cancel()
	c := &llamaClient{ctx: ctx, do: tap.do, root: llamaRoot(tap.url), rollout: tap.rollout}
	var tpl struct {
		Prompt string `json:"prompt"`
	}
	var tok struct {
		Tokens []int32 `json:"tokens"`
	}
	err := c.call("/apply-template", tap.request, &tpl)
	if err == nil {
		in, _ := json.Marshal(map[string]any{"content": tpl.Prompt, "add_special": true, "parse_special": true})
		err = c.call("/tokenize", in, &tok)
	}
	note := ""
	switch {
	case err != nil:
		note = "llama-server's prompt ids could not be had: " + err.Error()
	case len(tok.Tokens) != rd.Usage.PromptTokens:
		note = fmt.Sprintf("llama-server's /tokenize of its /apply-template gives %d prompt ids, its answer counted %d: prompt ids missing", len(tok.Tokens), rd.Usage.PromptTokens)
	default:
		rd.PromptTokenIDs = tok.Tokens
		rd.TokenNote = strings.TrimPrefix(strings.ReplaceAll(rd.TokenNote, noteNoPromptIDs, ""), "; ")
		rd.TokenNote = strings.TrimSuffix(rd.TokenNote, "; ")
		return
	}
	if rd.TokenNote != "" {
		rd.TokenNote += "; "
	}
	rd.TokenNote += note
}

// Token ids back to the server, as NeMo Gym's model server sends them (its Responses to Chat
// Completions converter puts a model call's prompt_token_ids, generation_token_ids and
// generation_log_probs on the assistant message that call produced): a server that trains on
// the ids (NeMo RL's vLLM and TRT-LLM servers, rollout's simulator) then builds the next
// prompt from the previous call's prompt and generated ids and the chat template's rendering
// of what follows that message (NeMo RL's replace_prefix_tokens), instead of re-tokenizing the
// previous answer's text, which need not give back the ids the model generated. Each call's
// prompt ids then begin with the previous call's prompt and generated ids: the contiguity
// NeMo RL's nemo_gym postprocessing asserts ("Non-contiguous messages found!"). Other servers
// ignore the members.

// tokenPrefix is the previous call's tokens and the index of its answer in the request's
// messages.
type tokenPrefix struct {
	message int
	round   *Round
}

// lastRound is tr's last round, or nil.
func lastRound(tr *Trajectory) *Round {
	if tr == nil || len(tr.Rounds) == 0 {
		return nil
	}
	return &tr.Rounds[len(tr.Rounds)-1]
}

// sendTokens says where prev's tokens go in msgs: on the last assistant message, when it is
// prev's answer (its text and number of tool calls) and prev has prompt and generation ids;
// nil otherwise (a context strategy that left prev's answer out, an endpoint that returned no
// ids).
func sendTokens(msgs []openai.ChatCompletionMessage, prev *Round) *tokenPrefix {
	if prev == nil || prev.PromptTokenIDs == nil || len(prev.GenerationTokenIDs) == 0 {
		return nil
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		m := &msgs[i]
		if m.Role != openai.ChatMessageRoleAssistant {
			continue
		}
		sameText := m.Content == prev.Content || m.Content == emptyContent && prev.Content == ""
		sameCalls := len(prev.ToolCalls) == 0 || len(m.ToolCalls) == len(prev.ToolCalls)
		if !sameText || !sameCalls {
			return nil
		}
		return &tokenPrefix{message: i, round: prev}
	}
	return nil
}

// withTokens is the request body with p's token ids on its assistant message; body as it is
// when p is nil or the body is not what go-openai writes.
func withTokens(body []byte, p *tokenPrefix) []byte {
	if p == nil {
		return body
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return body
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(obj["messages"], &msgs); err != nil || p.message >= len(msgs) {
		return body
	}
	rd := p.round
	lp := rd.GenerationLogProbs
	if lp == nil {
		lp = []float64{}
	}
	m := msgs[p.message]
	var err error
	if m["prompt_token_ids"], err = json.Marshal(rd.PromptTokenIDs); err != nil {
		return body
	}
	if m["generation_token_ids"], err = json.Marshal(rd.GenerationTokenIDs); err != nil {
		return body
	}
	if m["generation_log_probs"], err = json.Marshal(lp); err != nil {
		return body
	}
	if obj["messages"], err = json.Marshal(msgs); err != nil {
		return body
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return body
	}
	return out
}
