package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"github.com/sashabaranov/go-openai/jsonschema"

	"github.com/rollout-dev/rollout/pkg/agent"
)

// chatRequests is a table of requests: what the runner sends (the bench row's multi-step
// request at rounds 1 and 3) and every member of a request set, alone or together, with the
// strings encoding/json escapes.
func chatRequests(t *testing.T) map[string]openai.ChatCompletionRequest {
	c := benchConfig(t, agent.NewOpenAIModel("http://127.0.0.1:1/v1", "", nil))
	task := parseTask(t, benchRow)
	out := map[string]openai.ChatCompletionRequest{}
	for _, rounds := range []int{1, 3} {
		_, tr := conversation(t, benchRow, rounds-1)
		req := c.MultiRequest(task.Params, 7)
		req.Messages = tr.Messages
		out[fmt.Sprintf("bench round %d", rounds)] = req
	}
	_, tr := conversation(t, nemoRow(t), 2)
	out["nemo gym row"] = openai.ChatCompletionRequest{Model: "m", Messages: tr.Messages}
	seed, idx := 42, 1
	msgs := []openai.ChatCompletionMessage{
		{Role: "system", Content: "<b>&amp;</b> \u2028\u2029 \x01 \xff é"},
		{Role: "user", Content: "hi", Name: "u<1>"},
		{Role: "assistant", ReasoningContent: "think", Refusal: "no", ToolCalls: []openai.ToolCall{
			{Index: &idx, ID: "c1", Type: "function", Function: openai.FunctionCall{Name: "f", Arguments: `{"a":"<&>"}`}}, {}}},
		{Role: "tool", ToolCallID: "c1", Content: `{"ok":true}`},
	}
	params := json.RawMessage("{ \"type\": \"object\",\n \"properties\": {\"q\": {\"type\":\"string\", \"pattern\": \"<a&b>\u2028\"}} }")
	tools := []openai.Tool{
		{Type: "function", Function: &openai.FunctionDefinition{Name: "f", Description: "does <f>", Strict: true, Parameters: params}},
		{Type: "function", Function: &openai.FunctionDefinition{Name: "g"}},
		{Type: "function", Function: &openai.FunctionDefinition{Name: "h", Parameters: map[string]any{"type": "object", "b": 1, "a": "<"}}},
		{Type: "function", Function: &openai.FunctionDefinition{Name: "s", Parameters: jsonschema.Definition{Type: jsonschema.Object,
			Properties: map[string]jsonschema.Definition{"x": {Type: jsonschema.Number}}}}},
		{Type: "code_interpreter"},
	}
	all := openai.ChatCompletionRequest{
		Model: "gpt-<4>", Messages: msgs, MaxTokens: 100, MaxCompletionTokens: 200, Temperature: 0.7, TopP: 0.95, N: 2,
		Stop: []string{"</s>", "\n"}, PresencePenalty: -0.5,
		ResponseFormat: &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: "answer", Schema: json.RawMessage(`{"type": "object"}`), Strict: true}},
		Seed: &seed, FrequencyPenalty: 1e-7, LogitBias: map[string]int{"50256": -100, "13": 5}, LogProbs: true, TopLogProbs: 3,
		User: "user-1", Functions: []openai.FunctionDefinition{{Name: "old", Parameters: json.RawMessage(`{}`)}},
		FunctionCall: "auto", Tools: tools, ToolChoice: openai.ToolChoice{Type: "function", Function: openai.ToolFunction{Name: "f"}},
		StreamOptions: &openai.StreamOptions{IncludeUsage: true}, ParallelToolCalls: false, Store: true, ReasoningEffort: "low",
		Metadata: map[string]string{"k": "v"}, Prediction: &openai.Prediction{Type: "content", Content: "x"},
		ChatTemplateKwargs: map[string]any{"enable_thinking": false}, ServiceTier: openai.ServiceTierFlex, Verbosity: "low",
		SafetyIdentifier: "s", ChatCompletionRequestExtensions: openai.ChatCompletionRequestExtensions{GuidedChoice: []string{"a", "b"}},
	}
	out["every member"] = all
	out["empty"] = openai.ChatCompletionRequest{}
	out["no messages"] = openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{}}
	out["tool_choice string"] = openai.ChatCompletionRequest{Model: "m", Messages: msgs[:2], Tools: tools[:2], ToolChoice: "required", ParallelToolCalls: true}
	out["tool_choice raw"] = openai.ChatCompletionRequest{Model: "m", Messages: msgs[:2], Tools: tools[:1], ToolChoice: json.RawMessage(`{"type": "function", "function": {"name": "f"}}`)}
	out["zero temperature"] = openai.ChatCompletionRequest{Model: "m", Messages: msgs[:1], Temperature: math.SmallestNonzeroFloat32, TopP: math.SmallestNonzeroFloat32}
	out["big numbers"] = openai.ChatCompletionRequest{Model: "m", Messages: msgs[:1], Temperature: 1e21, TopP: 1e-7, FrequencyPenalty: 3.4028235e38}
	out["response_format json_object"] = openai.ChatCompletionRequest{Model: "m", Messages: msgs[:1], ResponseFormat: &openai.ChatCompletionResponseFormat{Type: "json_object"}}
	out["stream options"] = openai.ChatCompletionRequest{Model: "m", Messages: msgs[:1], StreamOptions: &openai.StreamOptions{}}
	// What go-openai refuses before sending.
	out["stream"] = openai.ChatCompletionRequest{Model: "m", Messages: msgs[:1], Stream: true}
	out["reasoning model's limits"] = openai.ChatCompletionRequest{Model: "o1-mini", Messages: msgs[:1], Temperature: 0.5}
	out["legacy model"] = openai.ChatCompletionRequest{Model: "text-davinci-003", Messages: msgs[:1]}
	// What the fast encoder leaves to go-openai: each is encoded the same or refused the same.
	out["content parts"] = openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user",
		MultiContent: []openai.ChatMessagePart{{Type: "text", Text: "a"}, {Type: "image_url", ImageURL: &openai.ChatMessageImageURL{URL: "http://x/<y>"}}}}}}
	out["content and parts"] = openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "a",
		MultiContent: []openai.ChatMessagePart{{Type: "text", Text: "a"}}}}}
	out["function_call message"] = openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "assistant",
		FunctionCall: &openai.FunctionCall{Name: "f", Arguments: "{}"}}}}
	out["tool parameters inline"] = openai.ChatCompletionRequest{Model: "m", Messages: msgs[:1], Tools: []openai.Tool{{Type: "web_search",
		Parameters: map[string]any{"search_context_size": "low"}}}}
	out["tool parameters override"] = openai.ChatCompletionRequest{Model: "m", Messages: msgs[:1], Tools: []openai.Tool{{Type: "web_search",
		Parameters: map[string]any{"type": "x"}}}}
	out["invalid raw parameters"] = openai.ChatCompletionRequest{Model: "m", Messages: msgs[:1], Tools: []openai.Tool{{Type: "function",
		Function: &openai.FunctionDefinition{Name: "f", Parameters: json.RawMessage(`{"a":`)}}}}
	out["empty raw parameters"] = openai.ChatCompletionRequest{Model: "m", Messages: msgs[:1], Tools: []openai.Tool{{Type: "function",
		Function: &openai.FunctionDefinition{Name: "f", Parameters: json.RawMessage{}}}}}
	out["nil raw tool_choice"] = openai.ChatCompletionRequest{Model: "m", Messages: msgs[:1], ToolChoice: json.RawMessage(nil)}
	out["NaN temperature"] = openai.ChatCompletionRequest{Model: "m", Messages: msgs[:1], Temperature: float32(math.NaN())}
	out["unencodable kwargs"] = openai.ChatCompletionRequest{Model: "m", Messages: msgs[:1], ChatTemplateKwargs: map[string]any{"f": func() {}}}
	return out
}

// The fast encoder writes what json.Marshal writes for every request it takes on (byte for
// byte), takes on what the runner sends, and refuses only what it leaves to go-openai.
func TestChatRequestJSONIsEncodingJSONs(t *testing.T) {
	mustTake := map[string]bool{"bench round 1": true, "bench round 3": true, "nemo gym row": true, "every member": true,
		"tool_choice string": true, "tool_choice raw": true, "zero temperature": true, "big numbers": true}
	for name, req := range chatRequests(t) {
		want, werr := json.Marshal(req)
		got, ok := agent.AppendChatRequest([]byte("x"), &req)
		if mustTake[name] && !ok {
			t.Errorf("%s: the fast encoder left it to go-openai", name)
		}
		if !ok {
			continue
		}
		if werr != nil {
			t.Errorf("%s: encoded what encoding/json refuses (%v): %s", name, werr, got)
			continue
		}
		if !bytes.Equal(got, append([]byte("x"), want...)) {
			t.Errorf("%s:\n got %s\nwant x%s", name, got, want)
		}
	}
	for _, s := range nasty {
		req := openai.ChatCompletionRequest{Model: s, User: s, Stop: []string{s}, ToolChoice: s, Messages: []openai.ChatCompletionMessage{
			{Role: s, Content: s, Name: s, ToolCalls: []openai.ToolCall{{ID: s, Type: openai.ToolType(s), Function: openai.FunctionCall{Name: s, Arguments: s}}}}},
			Tools: []openai.Tool{{Type: openai.ToolType(s), Function: &openai.FunctionDefinition{Name: s, Description: s,
				Parameters: json.RawMessage(`{"d":` + string(mustMarshal(t, s)) + `}`)}}}}
		want, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := agent.AppendChatRequest(nil, &req); !ok || !bytes.Equal(got, want) {
			t.Errorf("%q: ok %v\n got %s\nwant %s", s, ok, got, want)
		}
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wireCapture is a test server that keeps each request's method, path, headers and body, and
// answers with the next of its answers (by the request's X-Answer header).
type wireCapture struct {
	mu   sync.Mutex
	seen []string
}

func (c *wireCapture) last() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.seen) == 0 {
		return ""
	}
	return c.seen[len(c.seen)-1]
}

// wireAnswers are answers go-openai turns into a response or an error: successes, error bodies
// of each shape, malformed and empty answers, and a connection closed mid-answer.
var wireAnswers = map[string]func(w http.ResponseWriter){
	"ok": func(w http.ResponseWriter) {
		w.Header().Set("X-Request-Id", "r1")
		io.WriteString(w, `{"id":"c1","object":"chat.completion","created":7,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"","tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{\"n\":2}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":11,"completion_tokens":3,"total_tokens":14}}`)
	},
	"trailing":  func(w http.ResponseWriter) { io.WriteString(w, `{"id":"c2","choices":[]} trailing`) },
	"malformed": func(w http.ResponseWriter) { io.WriteString(w, `{"id":"c3","choices":[{"message":`) },
	"wrongtype": func(w http.ResponseWriter) { io.WriteString(w, `{"id":"c4","choices":{"message":"x"}}`) },
	"empty":     func(w http.ResponseWriter) {},
	"400": func(w http.ResponseWriter) {
		w.WriteHeader(400)
		io.WriteString(w, `{"error":{"message":"too long","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`)
	},
	"429": func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(429)
		io.WriteString(w, `{"error":{"message":"slow down","type":"rate_limit","code":429}}`)
	},
	"500 text": func(w http.ResponseWriter) { w.WriteHeader(500); io.WriteString(w, "Internal Server Error") },
	"503 flat": func(w http.ResponseWriter) {
		w.WriteHeader(503)
		io.WriteString(w, `{"object":"error","message":"busy","code":503}`)
	},
	"502 error text": func(w http.ResponseWriter) { w.WriteHeader(502); io.WriteString(w, `{"error":"bad gateway"}`) },
	"422 detail": func(w http.ResponseWriter) {
		w.WriteHeader(422)
		io.WriteString(w, `{"detail":[{"loc":["body"],"msg":"x"}]}`)
	},
	"404 empty":       func(w http.ResponseWriter) { w.WriteHeader(404) },
	"300 redirect-ok": func(w http.ResponseWriter) { w.WriteHeader(304) },
	"reset": func(w http.ResponseWriter) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		}
	},
	"cut": func(w http.ResponseWriter) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err == nil {
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":\"c5\",\"choi")
			buf.Flush()
			conn.Close()
		}
	},
}

// NewOpenAIModel sends what go-openai's own client sends, byte for byte (the request line,
// every header, the body), for every request of the table, and gives the answer or the error
// go-openai gives for every kind of answer: errors of the same types with the same text.
func TestOpenAIModelSendsWhatGoOpenAISends(t *testing.T) {
	capture := &wireCapture{}
	var answer struct {
		sync.Mutex
		name string
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var h strings.Builder
		r.Header.Write(&h)
		capture.mu.Lock()
		capture.seen = append(capture.seen, fmt.Sprintf("%s %s %s\n%s\n%s", r.Method, r.URL, r.Proto, h.String(), body))
		capture.mu.Unlock()
		answer.Lock()
		name := answer.name
		answer.Unlock()
		wireAnswers[name](w)
	}))
	defer srv.Close()
	for _, key := range []string{"", "sk-test"} {
		cfg := openai.DefaultConfig(key)
		cfg.BaseURL = srv.URL + "/v1/"
		cfg.HTTPClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		theirs := openai.NewClientWithConfig(cfg)
		ours := agent.NewOpenAIModel(srv.URL+"/v1/", key, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}})
		for name, req := range chatRequests(t) {
			answer.Lock()
			answer.name = "ok"
			answer.Unlock()
			want, wantErr := theirs.CreateChatCompletion(context.Background(), req)
			wantWire := capture.last()
			got, gotErr := ours.CreateChatCompletion(context.Background(), req)
			gotWire := capture.last()
			got.Header().Del("Date")
			want.Header().Del("Date")
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Errorf("key %q, %s: error %v, go-openai's %v", key, name, gotErr, wantErr)
			}
			if wantErr == nil && gotWire != wantWire {
				t.Errorf("key %q, %s: on the wire\n%s\ngo-openai's\n%s", key, name, gotWire, wantWire)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("key %q, %s: answer %+v, go-openai's %+v", key, name, got, want)
			}
		}
		req := chatRequests(t)["bench round 3"]
		for name := range wireAnswers {
			answer.Lock()
			answer.name = name
			answer.Unlock()
			want, wantErr := theirs.CreateChatCompletion(context.Background(), req)
			got, gotErr := ours.CreateChatCompletion(context.Background(), req)
			if errText(gotErr) != errText(wantErr) || reflect.TypeOf(gotErr) != reflect.TypeOf(wantErr) {
				t.Errorf("answer %s: error %T %v, go-openai's %T %v", name, gotErr, gotErr, wantErr, wantErr)
			}
			var gotAPI, wantAPI *openai.APIError
			if errors.As(gotErr, &gotAPI) != errors.As(wantErr, &wantAPI) || gotAPI != nil && !reflect.DeepEqual(*gotAPI, *wantAPI) {
				t.Errorf("answer %s: API error %+v, go-openai's %+v", name, gotAPI, wantAPI)
			}
			var gotReq, wantReq *openai.RequestError
			if errors.As(gotErr, &gotReq) != errors.As(wantErr, &wantReq) || gotReq != nil && !reflect.DeepEqual(*gotReq, *wantReq) {
				t.Errorf("answer %s: request error %+v, go-openai's %+v", name, gotReq, wantReq)
			}
			// The response, header and all; the Date header differs between the two calls.
			got.Header().Del("Date")
			want.Header().Del("Date")
			if !reflect.DeepEqual(got, want) {
				t.Errorf("answer %s: answer %+v, go-openai's %+v", name, got, want)
			}
		}
	}
}

// clientPort is the client's side of a connection in an error's text, which differs between
// two calls.
var clientPort = regexp.MustCompile(`127\.0\.0\.1:\d+->`)

func errText(err error) string {
	return clientPort.ReplaceAllString(fmt.Sprint(err), "127.0.0.1:PORT->")
}

// The "every member" request sets every JSON member of go-openai's request (but stream, which
// go-openai refuses here), so that a go-openai version with a new member fails the byte-for-byte
// comparison above instead of the fast encoder dropping that member unseen.
func TestEveryMemberRequestSetsEveryMember(t *testing.T) {
	all := chatRequests(t)["every member"]
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		for i := range v.NumField() {
			sf, f := v.Type().Field(i), v.Field(i)
			if !sf.IsExported() || strings.HasPrefix(sf.Tag.Get("json"), "-") || sf.Name == "Stream" {
				continue
			}
			if sf.Anonymous && f.Kind() == reflect.Struct {
				walk(f)
				continue
			}
			if f.IsZero() {
				t.Errorf("the every-member request leaves %s.%s unset: set it, and teach appendChatRequest its member", v.Type().Name(), sf.Name)
			}
		}
	}
	walk(reflect.ValueOf(all))
}
