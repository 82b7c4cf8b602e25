package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rollout-dev/rollout/pkg/wire"
	openai "github.com/sashabaranov/go-openai"
)

// Token-in calls to llama-server (Config.CaptureTokens against llama.cpp's llama-server).
//
// llama-server's chat endpoint takes no token ids back: it renders the whole history through
// the chat template and tokenizes it, so the next prompt holds the template's rendering of the
// previous answer (its JSON re-serialized, its whitespace the template's, its text
// re-tokenized), not the ids the model generated, and NeMo RL refuses the rollout ("Non-contiguous
// messages found!"). Once an answer shows that the endpoint is llama-server (its log-probs carry
// a per-token "id"), every later call of the run is made the way NeMo RL keeps prompts
// contiguous for vLLM (its replace_prefix_tokens), on the client side:
//
//  1. the request as it would be sent to the chat endpoint is rendered by the server's own chat
//     template (POST /apply-template) and tokenized by the server (POST /tokenize, special
//     tokens parsed and added, as the chat endpoint does): the template's ids;
//  2. when the request carries the previous call's tokens (sendTokens), the messages before
//     that call's answer are rendered the same way without the generation prompt: its number of
//     end-of-sequence tokens (the server's eos_token, from GET /props) is n, and the template's
//     ids are cut at their (n+1)-th one, the end of the previous answer. The prompt is the
//     previous call's prompt ids and generated ids (without a final end-of-sequence token),
//     then the template's ids from the cut on. When the previous prompt's end-of-sequence count
//     is not n (a context strategy left messages out), the template's ids are the prompt and
//     the round's token note says why;
//  3. the prompt goes to POST /completion as token ids, with the request's sampling members,
//     n_predict from max_tokens and n_probs 1: the answer carries each generated token's id
//     and log-probability;
//  4. the generated text is parsed as llama-server parses a Hermes 2 Pro template's answer
//     (Qwen2.5, Qwen3, Hermes): a leading <think>...</think> is the reasoning, each
//     <tool_call>{"name": ..., "arguments": {...}}</tool_call> block a tool call, the text
//     before the first block the content, and the call is answered as a chat completion with
//     the prompt ids at the top ("prompt_token_ids", vLLM's member).
//
// What the chat endpoint does and this path does not: its tool-call grammar (generation here is
// unconstrained, as vLLM's with tool_choice auto) and its parsers of other templates. A request
// it cannot answer the same way (response_format, a tool_choice other than auto, tools under a
// template without <tool_call> blocks, a server without /props or /completion) goes to the chat
// endpoint as before, and the round's token note says why.

// llamaState is what a run knows of its llama-server: seen once an answer carried per-token
// ids; the rest is probed once, at the first call after that.
type llamaState struct {
	mu     sync.Mutex
	probed bool
	eos    int32  // the id of the server's eos_token
	hermes bool   // the chat template writes tool calls as <tool_call> blocks
	off    string // why the token-in path is not taken, when it is not
}

// llamaHelperTimeout bounds the /apply-template and /tokenize calls that give a chat call's
// prompt ids (llamaPromptIDs): they are quick, and a server that does not answer them must not
// hold the rollout.
const llamaHelperTimeout = 30 * time.Second

// llamaProps is the part of GET /props that the token-in path reads.
type llamaProps struct {
	ChatTemplate string `json:"chat_template"`
	EOSToken     string `json:"eos_token"`
}

// llamaRoot is the server's root URL from the chat endpoint's: ".../v1/chat/completions" ->
// "...".
func llamaRoot(u *url.URL) url.URL {
	root := *u
	root.Path = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(root.Path, "/"), "/chat/completions"), "/v1")
	root.RawQuery = ""
	return root
}

// llamaClient makes the token-in path's calls to one llama-server through do (the model
// client's doer: its retries and limits).
type llamaClient struct {
	ctx context.Context
	do  interface {
		Do(*http.Request) (*http.Response, error)
	}
	root url.URL
	// rollout is the chat request's wire.RolloutIDHeader, sent on with every call so that a
	// pool of endpoints sends them where it sends the rollout's chat requests.
	rollout string
	// endpoint is the wire.EndpointHeader of the last answer (a pool's endpoint that gave it).
	endpoint string
}

// statusError is a llama-server answer with a status other than 200, kept whole so that the
// chat call fails as it would have (the same status and error body).
type statusError struct {
	path   string
	status int
	header http.Header
	body   []byte
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %s", e.path, e.status, errClip(string(e.body)))
}

// call sends body (nil: a GET) to path and decodes a 200 answer into v.
func (c *llamaClient) call(path string, body []byte, v any) error {
	u := c.root
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	method := http.MethodGet
	var rd io.Reader
	if body != nil {
		method, rd = http.MethodPost, bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(c.ctx, method, u.String(), rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// A pool sends the call to the root of the rollout's endpoint; only /completion is a model
	// call of it.
	role := wire.ServerRootHelper
	if path == "/completion" {
		role = wire.ServerRootCall
	}
	req.Header.Set(wire.ServerRootHeader, role)
	if c.rollout != "" {
		req.Header.Set(wire.RolloutIDHeader, c.rollout)
	}
	resp, err := c.do.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	c.endpoint = resp.Header.Get(wire.EndpointHeader)
	data, err := io.ReadAll(io.LimitReader(resp.Body, DefaultMaxModelAnswerBytes))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return &statusError{path: path, status: resp.StatusCode, header: resp.Header, body: data}
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: the answer is not what llama-server writes: %v", path, err)
	}
	return nil
}

// tokenize is the server's tokenization of text, special tokens parsed; withSpecial adds
// the model's BOS where it has one, as the chat endpoint does to a prompt.
func (c *llamaClient) tokenize(text string, withSpecial bool) ([]int32, error) {
	in, _ := json.Marshal(map[string]any{"content": text, "add_special": withSpecial, "parse_special": true})
	var tok struct {
		Tokens []int32 `json:"tokens"`
	}
	if err := c.call("/tokenize", in, &tok); err != nil {
		return nil, err
	}
	return tok.Tokens, nil
}

// render is the server's chat template applied to a chat request body, tokenized.
func (c *llamaClient) render(body []byte) ([]int32, error) {
	var tpl struct {
		Prompt *string `json:"prompt"`
	}
	if err := c.call("/apply-template", body, &tpl); err != nil {
		return nil, err
	}
	if tpl.Prompt == nil {
		return nil, errors.New("/apply-template: the answer has no prompt")
	}
	return c.tokenize(*tpl.Prompt, true)
}

// probe reads the server's eos_token and chat template once per run (GET /props).
func (s *llamaState) probe(c *llamaClient) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.probed {
		return
	}
	var p llamaProps
	err := c.call("/props", nil, &p)
	if err == nil && p.EOSToken == "" {
		err = errors.New("/props: no eos_token")
	}
	var ids []int32
	if err == nil {
		ids, err = c.tokenize(p.EOSToken, false)
	}
	if err == nil && len(ids) != 1 {
		err = fmt.Errorf("its eos_token %q is %d tokens, not one", p.EOSToken, len(ids))
	}
	if c.ctx.Err() != nil {
		return // probed again by the next call
	}
	s.probed = true
	if err != nil {
		s.off = "llama-server's token-in path is off (" + err.Error() + "): prompts are re-rendered by its chat endpoint"
		return
	}
	s.eos, s.hermes = ids[0], strings.Contains(p.ChatTemplate, "<tool_call>")
}

// errChatEndpoint says that a request is sent to the chat endpoint: the token-in path cannot
// answer it as the chat endpoint would.
type errChatEndpoint struct{ why string }

func (e *errChatEndpoint) Error() string { return e.why }

// tokenIn answers the chat request req (body as sent) by the token-in path. It returns the
// answer as the chat endpoint's; a nil answer and nil error when the request goes to the chat
// endpoint instead (t.tokenNote says why).
func (tc *TokenCapture) tokenIn(req *http.Request, t *answerTap, do interface {
	Do(*http.Request) (*http.Response, error)
}) (*http.Response, error) {
	c := &llamaClient{ctx: req.Context(), do: do, root: llamaRoot(req.URL), rollout: req.Header.Get(wire.RolloutIDHeader)}
	s := &tc.llama
	s.probe(c)
	s.mu.Lock()
	off, eos, hermes := s.off, s.eos, s.hermes
	s.mu.Unlock()
	if off != "" {
		t.tokenNote = off
		return nil, nil
	}
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	answer, note, err := llamaComplete(c, t.request, t.prev, eos, hermes)
	var chat *errChatEndpoint
	var status *statusError
	switch {
	case errors.As(err, &chat):
		t.tokenNote = "prompt re-rendered by llama-server's chat endpoint: " + chat.why
		return nil, nil
	case errors.As(err, &status):
		// The server refused: the call fails as the chat call would have.
		return &http.Response{StatusCode: status.status, Header: status.header, Body: io.NopCloser(bytes.NewReader(status.body)),
			ContentLength: int64(len(status.body)), Request: req}, nil
	case err != nil:
		return nil, err
	}
	t.tokenNote = note
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	if c.endpoint != "" {
		h.Set(wire.EndpointHeader, c.endpoint) // the round's endpoint, as a chat answer's
	}
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: h, Body: io.NopCloser(bytes.NewReader(answer)),
		ContentLength: int64(len(answer)), Request: req, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

// chatOnly are the chat request's members that /completion has no use for or that the token-in
// path answers itself.
var chatOnly = []string{"messages", "tools", "tool_choice", "parallel_tool_calls", "logprobs", "top_logprobs",
	"return_tokens_as_token_ids", "return_token_ids", "max_tokens", "max_completion_tokens", "stream", "stream_options",
	"model", "n", "chat_template_kwargs", "reasoning_format", "add_generation_prompt"}

// llamaComplete makes one token-in call: the prompt ids (the template's, spliced after prev's
// tokens), /completion, and its answer as a chat completion's JSON. note says what the round's
// tokens lack, if anything.
func llamaComplete(c *llamaClient, body []byte, prev *tokenPrefix, eos int32, hermes bool) (answer []byte, note string, err error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, "", &errChatEndpoint{"the request is not a JSON object"}
	}
	for _, k := range []string{"response_format", "grammar", "json_schema"} {
		if _, ok := obj[k]; ok {
			return nil, "", &errChatEndpoint{"the request has " + k}
		}
	}
	if tc, ok := obj["tool_choice"]; ok && string(tc) != `"auto"` {
		return nil, "", &errChatEndpoint{"the request's tool_choice is " + errClip(string(tc))}
	}
	if n, ok := obj["n"]; ok && string(n) != "1" {
		return nil, "", &errChatEndpoint{"the request asks for n " + errClip(string(n))}
	}
	if tools, ok := obj["tools"]; ok && string(tools) != "null" && string(tools) != "[]" && !hermes {
		return nil, "", &errChatEndpoint{"the chat template does not write tool calls as <tool_call> blocks"}
	}
	ids, err := c.render(body)
	if err != nil {
		return nil, "", err
	}
	prompt := ids
	if prev != nil {
		prompt, note, err = splicePrompt(c, obj, prev, ids, eos)
		if err != nil {
			return nil, "", err
		}
	}

	in := make(map[string]json.RawMessage, len(obj)+4)
	for k, v := range obj {
		if !slices.Contains(chatOnly, k) {
			in[k] = v
		}
	}
	in["prompt"], _ = json.Marshal(prompt)
	in["n_probs"] = json.RawMessage("1")
	in["return_tokens"] = json.RawMessage("true")
	in["cache_prompt"] = json.RawMessage("true")
	in["n_predict"] = json.RawMessage("-1")
	for _, k := range []string{"max_completion_tokens", "max_tokens"} {
		if v, ok := obj[k]; ok && string(v) != "null" {
			in["n_predict"] = v
			break
		}
	}
	req, _ := json.Marshal(in)
	var out completionAnswer
	if err := c.call("/completion", req, &out); err != nil {
		return nil, "", err
	}
	var model string
	json.Unmarshal(obj["model"], &model)
	answer, missing, err := out.chat(prompt, model)
	if err != nil {
		return nil, "", err
	}
	if missing != "" {
		note = strings.TrimPrefix(note+"; "+missing, "; ")
	}
	return answer, note, nil
}

// splicePrompt is the prompt of a call that follows prev: prev's prompt and generated ids,
// then ids (the template's ids of the whole request) from the end of prev's answer on.
func splicePrompt(c *llamaClient, obj map[string]json.RawMessage, prev *tokenPrefix, ids []int32, eos int32) ([]int32, string, error) {
	var msgs []json.RawMessage
	if err := json.Unmarshal(obj["messages"], &msgs); err != nil || prev.message > len(msgs) {
		return ids, "the request's messages could not be read: prompt ids are the template's", nil
	}
	before := make(map[string]json.RawMessage, len(obj))
	for k, v := range obj {
		before[k] = v
	}
	before["messages"], _ = json.Marshal(msgs[:prev.message])
	before["add_generation_prompt"] = json.RawMessage("false")
	body, _ := json.Marshal(before)
	head, err := c.render(body)
	if err != nil {
		return nil, "", err
	}
	n := countID(head, eos)
	rd := prev.round
	if m := countID(rd.PromptTokenIDs, eos); m != n {
		return ids, fmt.Sprintf("the previous prompt has %d end-of-sequence tokens, the messages before its answer render with %d (messages left out or changed): prompt ids are the template's", m, n), nil
	}
	cut := -1
	for i, id := range ids {
		if id == eos {
			if n == 0 {
				cut = i
				break
			}
			n--
		}
	}
	if cut < 0 {
		return ids, "the template's rendering has no end-of-sequence token after the previous answer: prompt ids are the template's", nil
	}
	gen := rd.GenerationTokenIDs
	if len(gen) > 0 && gen[len(gen)-1] == eos {
		gen = gen[:len(gen)-1]
	}
	out := make([]int32, 0, len(rd.PromptTokenIDs)+len(gen)+len(ids)-cut)
	out = append(append(append(out, rd.PromptTokenIDs...), gen...), ids[cut:]...)
	return out, "", nil
}

func countID(ids []int32, id int32) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

// completionAnswer is llama-server's /completion answer (not OpenAI's shape).
type completionAnswer struct {
	Content         string  `json:"content"`
	Tokens          []int32 `json:"tokens"`
	TokensPredicted int     `json:"tokens_predicted"`
	TokensEvaluated int     `json:"tokens_evaluated"`
	StopType        string  `json:"stop_type"`
	Truncated       bool    `json:"truncated"`
	Timings         struct {
		CacheN int `json:"cache_n"`
	} `json:"timings"`
	Probs []struct {
		ID      *int32   `json:"id"`
		Token   string   `json:"token"`
		Logprob *float64 `json:"logprob"`
	} `json:"completion_probabilities"`
}

// chat is the answer as the chat endpoint writes one, with the prompt's ids at the top. An
// answer without an id and a finite log-probability for every generated token is written
// without log-probs (the round is then recorded without generation ids, with a note, as from
// any endpoint that returns none) and note says what was missing.
func (a *completionAnswer) chat(prompt []int32, model string) (answer []byte, note string, err error) {
	if a.Truncated {
		return nil, "", errors.New("/completion: llama-server truncated the prompt (it is longer than the slot's context)")
	}
	type logprob struct {
		ID          int32   `json:"id"`
		Token       string  `json:"token"`
		Logprob     float64 `json:"logprob"`
		TopLogprobs []any   `json:"top_logprobs"`
	}
	content := make([]logprob, 0, len(a.Probs))
	for i, p := range a.Probs {
		if p.ID == nil || p.Logprob == nil || math.IsNaN(*p.Logprob) || math.IsInf(*p.Logprob, 0) {
			note = fmt.Sprintf("llama-server's /completion gave generated token %d no id or no finite log-probability", i)
			break
		}
		content = append(content, logprob{ID: *p.ID, Token: p.Token, Logprob: *p.Logprob, TopLogprobs: []any{}})
	}
	if note == "" && len(content) != a.TokensPredicted {
		note = fmt.Sprintf("llama-server's /completion gave %d log-probabilities for %d generated tokens (n_probs not honoured)", len(content), a.TokensPredicted)
	}
	if note != "" {
		content = nil
	}
	msg := parseHermes(a.Content)
	finish := "stop"
	switch {
	case a.StopType == "limit":
		finish = "length"
	case len(msg.ToolCalls) > 0:
		finish = "tool_calls"
	}
	type logprobs struct {
		Content []logprob `json:"content"`
	}
	type choice struct {
		Index        int                          `json:"index"`
		Message      openai.ChatCompletionMessage `json:"message"`
		FinishReason string                       `json:"finish_reason"`
		Logprobs     *logprobs                    `json:"logprobs"`
	}
	ch := choice{Message: msg, FinishReason: finish}
	if content != nil {
		ch.Logprobs = &logprobs{Content: content}
	}
	out := struct {
		ID             string   `json:"id"`
		Object         string   `json:"object"`
		Model          string   `json:"model"`
		Choices        []choice `json:"choices"`
		Usage          any      `json:"usage"`
		PromptTokenIDs []int32  `json:"prompt_token_ids"`
	}{
		ID: "chatcmpl-token-in", Object: "chat.completion", Model: model, Choices: []choice{ch},
		Usage: map[string]any{"prompt_tokens": a.TokensEvaluated, "completion_tokens": a.TokensPredicted,
			"total_tokens": a.TokensEvaluated + a.TokensPredicted, "prompt_tokens_details": map[string]int{"cached_tokens": a.Timings.CacheN}},
		PromptTokenIDs: prompt,
	}
	answer, err = json.Marshal(out)
	return answer, note, err
}

// parseHermes reads a generated text as llama-server reads a Hermes 2 Pro template's answer: a
// leading <think>...</think> block is the reasoning; each <tool_call>...</tool_call> block
// holding {"name": ..., "arguments": {...}} a tool call (its arguments as JSON text, its id left
// for historyMessage to give); the text
// before the first block the content. A block that is not such an object (or is not closed)
// leaves the whole text as the content, with no tool calls.
func parseHermes(text string) openai.ChatCompletionMessage {
	msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant}
	rest := text
	if r, ok := strings.CutPrefix(strings.TrimLeft(rest, " \n"), "<think>"); ok {
		if think, after, ok := strings.Cut(r, "</think>"); ok {
			msg.ReasoningContent = strings.TrimSpace(think)
			rest = strings.TrimLeft(after, " \n")
		}
	}
	head, calls, ok := strings.Cut(rest, "<tool_call>")
	if !ok {
		msg.Content = rest
		return msg
	}
	var tcs []openai.ToolCall
	for {
		block, after, closed := strings.Cut(calls, "</tool_call>")
		var call struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if !closed || json.Unmarshal([]byte(strings.TrimSpace(block)), &call) != nil || call.Name == "" || !utf8.ValidString(block) {
			msg.Content = rest
			return msg
		}
		args := "{}"
		if len(call.Arguments) > 0 && string(call.Arguments) != "null" {
			var b bytes.Buffer
			if json.Compact(&b, call.Arguments) == nil {
				args = b.String()
			}
			var s string
			if json.Unmarshal(call.Arguments, &s) == nil {
				args = s // arguments written as a JSON string
			}
		}
		tcs = append(tcs, openai.ToolCall{Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: call.Name, Arguments: args}})
		next := strings.TrimLeft(after, " \n")
		if r, more := strings.CutPrefix(next, "<tool_call>"); more {
			calls = r
			continue
		}
		if strings.TrimSpace(next) != "" {
			head += next // text after the calls is content too
		}
		break
	}
	msg.Content = strings.TrimSpace(head)
	msg.ToolCalls = tcs
	return msg
}
