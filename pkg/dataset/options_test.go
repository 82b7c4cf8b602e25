package dataset

import (
	"encoding/json"
	"testing"
)

// A row's request options: the members of responses_create_params that are not Responses
// fields, extra_body's members at the top level (over the row's own), reasoning.effort as
// reasoning_effort; /verify gets responses_create_params without them.
func TestChatOptionsAndVerifyParams(t *testing.T) {
	cases := []struct {
		params, options, verify string
	}{
		{`{"input":"hi","temperature":0.5}`, ``, `{"input":"hi","temperature":0.5}`},
		{`{"input":"hi","top_k":3,"chat_template_kwargs":{"enable_thinking":false}}`, `{"top_k":3,"chat_template_kwargs":{"enable_thinking":false}}`, `{"input":"hi"}`},
		{`{"input":"hi","reasoning":{"effort":"low","summary":null}}`, `{"reasoning_effort":"low"}`, `{"input":"hi","reasoning":{"effort":"low","summary":null}}`},
		{`{"input":"hi","min_p":0.1,"extra_body":{"min_p":0.2,"stop":["x"]}}`, `{"min_p":0.2,"stop":["x"]}`, `{"input":"hi"}`},
		{`{"input":"hi","messages":[],"n":2,"top_k":1}`, `{"top_k":1}`, `{"input":"hi"}`},
	}
	for _, c := range cases {
		p, err := ParseParams(json.RawMessage(c.params))
		if err != nil {
			t.Fatalf("%s: %v", c.params, err)
		}
		if got := string(p.ChatOptions()); got != c.options {
			t.Errorf("%s: options %s, want %s", c.params, got, c.options)
		}
		got, changed := p.VerifyParams()
		if string(got) != c.verify || changed != (c.verify != c.params) {
			t.Errorf("%s: verify params %s (changed %v), want %s", c.params, got, changed, c.verify)
		}
	}
}
