package sim

import (
	"encoding/json"
	"testing"
)

func TestInSchemaOrder(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"source":{"type":"string"},"product":{"type":"string"},
		"filter":{"type":"object","properties":{"to":{},"from":{}}},"rows":{"type":"array","items":{"type":"object","properties":{"z":{},"a":{}}}}}}`)
	for _, c := range []struct{ name, args, want string }{
		{"sorted to schema order", `{"product":"P","source":"S"}`, `{"source":"S","product":"P"}`},
		{"absent properties are not added", `{"product":"P"}`, `{"product":"P"}`},
		{"unknown keys after, in their order", `{"y":1,"product":"P","x":2,"source":"S"}`, `{"source":"S","product":"P","y":1,"x":2}`},
		{"nested objects and array items", `{"rows":[{"a":1,"z":2}],"filter":{"from":1,"to":2},"source":null}`,
			`{"source":null,"filter":{"to":2,"from":1},"rows":[{"z":2,"a":1}]}`},
		{"values kept as written", `{"product":1.50,"source":"\u00e9"}`, `{"source":"\u00e9","product":1.50}`},
		{"invalid JSON left as is", `{"product":"P","source":`, `{"product":"P","source":`},
		{"not an object", `[1, 2]`, `[1,2]`},
	} {
		if got := inSchemaOrder(c.args, schema); got != c.want {
			t.Errorf("%s: %s -> %s, want %s", c.name, c.args, got, c.want)
		}
	}
	if got := inSchemaOrder(`{"b":1,"a":2}`, nil); got != `{"b":1,"a":2}` {
		t.Errorf("no schema: %s", got)
	}
}
