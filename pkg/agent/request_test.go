package agent

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func sameJSON(t *testing.T, got []byte, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("result is not JSON: %v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(g, w)
}

// MergePatch gives the results of RFC 7396's appendix A, every example.
func TestMergePatchRFC7396(t *testing.T) {
	cases := []struct{ target, patch, want string }{
		{`{"a":"b"}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"b"}`, `{"b":"c"}`, `{"a":"b","b":"c"}`},
		{`{"a":"b"}`, `{"a":null}`, `{}`},
		{`{"a":"b","b":"c"}`, `{"a":null}`, `{"b":"c"}`},
		{`{"a":["b"]}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"c"}`, `{"a":["b"]}`, `{"a":["b"]}`},
		{`{"a":{"b":"c"}}`, `{"a":{"b":"d","c":null}}`, `{"a":{"b":"d"}}`},
		{`{"a":[{"b":"c"}]}`, `{"a":[1]}`, `{"a":[1]}`},
		{`["a","b"]`, `["c","d"]`, `["c","d"]`},
		{`{"a":"b"}`, `["c"]`, `["c"]`},
		{`{"a":"foo"}`, `null`, `null`},
		{`{"a":"foo"}`, `"bar"`, `"bar"`},
		{`{"e":null}`, `{"a":1}`, `{"e":null,"a":1}`},
		{`[1,2]`, `{"a":"b","c":null}`, `{"a":"b"}`},
		{`{}`, `{"a":{"bb":{"ccc":null}}}`, `{"a":{"bb":{}}}`},
	}
	for _, c := range cases {
		got, err := MergePatch(json.RawMessage(c.target), json.RawMessage(c.patch))
		if err != nil {
			t.Errorf("%s + %s: %v", c.target, c.patch, err)
			continue
		}
		if !sameJSON(t, got, c.want) {
			t.Errorf("%s + %s = %s, want %s", c.target, c.patch, got, c.want)
		}
	}
}

// Applying ComposePatch(a, b) is applying a, then b, on every target.
func TestComposePatch(t *testing.T) {
	targets := []string{`{}`, `{"seed":3,"top_k":1,"chat_template_kwargs":{"enable_thinking":true,"y":2}}`, `{"top_k":{"x":1}}`}
	patches := []string{`{}`, `{"top_k":null}`, `{"top_k":5,"seed":null}`, `{"chat_template_kwargs":{"enable_thinking":false}}`,
		`{"chat_template_kwargs":null}`, `{"chat_template_kwargs":{"y":null,"z":[1]}}`}
	for _, target := range targets {
		for _, a := range patches {
			for _, b := range patches {
				step, _ := MergePatch(json.RawMessage(target), json.RawMessage(a))
				step, _ = MergePatch(step, json.RawMessage(b))
				ab, err := ComposePatch(json.RawMessage(a), json.RawMessage(b))
				if a == `{"chat_template_kwargs":null}` && strings.HasPrefix(b, `{"chat_template_kwargs":{`) {
					if err == nil {
						t.Errorf("%s then %s: no error", a, b)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				once, _ := MergePatch(json.RawMessage(target), ab)
				if !sameJSON(t, once, string(step)) {
					t.Errorf("target %s, %s then %s: composed %s gives %s, in two steps %s", target, a, b, ab, once, step)
				}
			}
		}
	}
}

// The members of the body keep their order; a patch's new members follow.
func TestMergePatchKeepsOrder(t *testing.T) {
	got, err := MergePatch(json.RawMessage(`{"model":"m","messages":[{"role":"user","content":"<b>"}],"seed":1}`), json.RawMessage(`{"top_k":2,"seed":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"model":"m","messages":[{"role":"user","content":"<b>"}],"top_k":2}`; string(got) != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
