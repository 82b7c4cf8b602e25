package agent_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/agent"
)

// Answers as servers send them (llama.cpp, vLLM, OpenAI), which the direct decoder must take
// on, and answers it must leave to encoding/json.
var (
	answersTaken = []string{
		// llama.cpp's llama-server
		`{"choices":[{"finish_reason":"tool_calls","index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"get_forecast","arguments":"{\"city\":\"Paris\",\"date\":\"2025-06-12\"}"},"id":"Xq1"}]}}],"created":1764200000,"model":"qwen","system_fingerprint":"b7000-abc","object":"chat.completion","usage":{"completion_tokens":24,"prompt_tokens":320,"total_tokens":344},"id":"chatcmpl-x","timings":{"prompt_n":1,"prompt_ms":0.5,"predicted_per_second":31.5}}`,
		// vLLM, with its nulls and empty lists
		`{"id":"chatcmpl-9","object":"chat.completion","created":1764200000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","reasoning_content":null,"content":"Paris is warmer; it rains in Berlin.","tool_calls":[]},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":30,"total_tokens":38,"completion_tokens":8,"prompt_tokens_details":null},"prompt_logprobs":null,"kv_transfer_params":null}`,
		// OpenAI, with token details, refusal null, annotations
		"{\n  \"id\": \"chatcmpl-B\",\n  \"object\": \"chat.completion\",\n  \"created\": 1741569952,\n  \"model\": \"gpt-4.1\",\n  \"choices\": [\n    {\n      \"index\": 0,\n      \"message\": {\n        \"role\": \"assistant\",\n        \"content\": \"Hello! \\u00e9\\ud83d\\ude00 <b>\",\n        \"refusal\": null,\n        \"annotations\": []\n      },\n      \"logprobs\": null,\n      \"finish_reason\": \"stop\"\n    }\n  ],\n  \"usage\": {\n    \"prompt_tokens\": 19,\n    \"completion_tokens\": 10,\n    \"total_tokens\": 29,\n    \"prompt_tokens_details\": {\"cached_tokens\": 0, \"audio_tokens\": 0},\n    \"completion_tokens_details\": {\"reasoning_tokens\": 0, \"audio_tokens\": 0, \"accepted_prediction_tokens\": 0, \"rejected_prediction_tokens\": 0}\n  },\n  \"service_tier\": \"default\",\n  \"system_fingerprint\": null\n}\n",
		// every member, odd but valid values
		`{"id":"a\"b\\c\u2028\ud800","object":"","created":-9223372036854775808,"model":"` + "\xff\xfeé" + `","choices":[null,{},{"index":-0,"message":null,"finish_reason":null,"content_filter_results":null},` +
			`{"message":{"role":"assistant","content":"x","refusal":"r","name":"n","reasoning_content":"t","function_call":{"name":"f","arguments":"{}"},"tool_calls":[null,{},{"index":null},{"index":3,"id":"i","type":"function","function":null,"extra":[1,{"a":[]}]}],"tool_call_id":"c"}}],` +
			`"usage":{"completion_tokens_details":null,"prompt_tokens_details":{}},"prompt_filter_results":null,"service_tier":null}`,
		`{"choices":[{"content_filter_results":{"hate":{"filtered":true,"severity":"low"},"jailbreak":{"filtered":false,"detected":true},"profanity":null}}]}`,
		`{}`, ` {"choices":[]} `, `{"choices":null,"usage":null}`,
	}
	answersLeft = []string{
		`{"id":"c2","choices":[]} trailing bytes`,
		`{"id":"c3","choices":[{"message":`,
		`{"id":"c4","choices":{"message":"x"}}`,
		``, `null`, `[]`, `"x"`,
		`{"ID":"upper"}`, `{"Choices":[]}`, `{"choices":[{"Message":{}}]}`,
		`{"id":"a","id":"b"}`, `{"choices":[{"message":{"content":"a","content":"b"}}]}`,
		`{"\u0069d":"escaped key"}`, `{"ſystem_fingerprint":"folds"}`,
		`{"choices":[{"message":{"role":"user","content":[{"type":"text","text":"parts"}]}}]}`,
		`{"choices":[{"message":{"MultiContent":[]}}]}`,
		`{"choices":[{"logprobs":{"content":[]}}]}`,
		`{"choices":[{"content_filter_results":{"hate":{"filtered":0}}}]}`,
		`{"prompt_filter_results":[]}`,
		`{"created":1.0}`, `{"created":1e3}`, `{"created":"1"}`, `{"created":9223372036854775808}`,
		`{"usage":{"prompt_tokens":1.5}}`, `{"choices":[{"index":true}]}`,
		`{"id":1}`, `{"choices":[{"message":{"tool_calls":{}}}]}`,
	}
)

// decodeLikeGoOpenAI decodes an answer as go-openai does: json.Decoder on the body.
func decodeLikeGoOpenAI(data []byte) (openai.ChatCompletionResponse, error) {
	var resp openai.ChatCompletionResponse
	err := json.NewDecoder(bytes.NewReader(data)).Decode(&resp)
	return resp, err
}

// checkAnswer holds the direct decoder to encoding/json: what it takes on it decodes to the
// same response, and it sets nothing in what it leaves.
func checkAnswer(t *testing.T, data []byte) bool {
	t.Helper()
	header := http.Header{"X-Id": {"1"}}
	var got openai.ChatCompletionResponse
	got.SetHeader(header)
	ok := agent.DecodeAnswer(data, &got)
	if !ok {
		var empty openai.ChatCompletionResponse
		empty.SetHeader(header)
		if !reflect.DeepEqual(got, empty) {
			t.Fatalf("%q: left to encoding/json, but set %+v", data, got)
		}
		return false
	}
	want, err := decodeLikeGoOpenAI(data)
	if err != nil {
		t.Fatalf("%q: decoded what encoding/json refuses (%v): %+v", data, err, got)
	}
	want.SetHeader(header)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n got %#v\nwant %#v", data, got, want)
	}
	return true
}

func TestDecodeAnswerIsEncodingJSONs(t *testing.T) {
	for _, a := range answersTaken {
		if !checkAnswer(t, []byte(a)) {
			t.Errorf("left to encoding/json: %s", a)
		}
	}
	for _, a := range answersLeft {
		if checkAnswer(t, []byte(a)) {
			t.Errorf("taken on: %s", a)
		}
	}
	for i := range 3 {
		body, err := json.Marshal(benchAnswer(i))
		if err != nil {
			t.Fatal(err)
		}
		if !checkAnswer(t, body) {
			t.Errorf("left to encoding/json: %s", body)
		}
	}
}

func FuzzDecodeAnswer(f *testing.F) {
	for _, a := range append(append([]string{}, answersTaken...), answersLeft...) {
		f.Add([]byte(a))
	}
	full := readEveryMemberAnswer(f)
	f.Add(full)
	f.Add(withoutMembers(f, full, leftToEncodingJSON...))
	f.Fuzz(func(t *testing.T, data []byte) { checkAnswer(t, data) })
}
