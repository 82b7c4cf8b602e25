package plan

import (
	"encoding/json"
	"testing"
)

func TestDrop(t *testing.T) {
	p, err := Parse(json.RawMessage(`{"rounds":[
		[{"name":"find","arguments":{"q":"x"}}],
		[{"name":"get","arguments":{"id":{"$ref":"0/ids/0"}}},{"name":"get","arguments":{"id":{"$ref":"0/ids/1"}}}],
		[{"name":"submit","arguments":{"values":[{"$ref":"1/v"},{"$ref":"2/v"}]}}]],
		"final":{"$ref":"3/ok"}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		drop int
		want string
	}{
		{0, `{"rounds":[[{"name":"get","arguments":{"id":null}},{"name":"get","arguments":{"id":null}}],[{"name":"submit","arguments":{"values":[{"$ref":"0/v"},{"$ref":"1/v"}]}}]],"final":{"$ref":"2/ok"}}`},
		{1, `{"rounds":[[{"name":"find","arguments":{"q":"x"}}],[{"name":"get","arguments":{"id":{"$ref":"0/ids/1"}}}],[{"name":"submit","arguments":{"values":[null,{"$ref":"1/v"}]}}]],"final":{"$ref":"2/ok"}}`},
		{3, `{"rounds":[[{"name":"find","arguments":{"q":"x"}}],[{"name":"get","arguments":{"id":{"$ref":"0/ids/0"}}},{"name":"get","arguments":{"id":{"$ref":"0/ids/1"}}}]],"final":null}`},
	} {
		d, err := p.Drop(tc.drop)
		if err != nil {
			t.Fatalf("Drop(%d): %v", tc.drop, err)
		}
		got, _ := json.Marshal(d)
		if string(got) != tc.want {
			t.Errorf("Drop(%d) =\n%s\nwant\n%s", tc.drop, got, tc.want)
		}
		if _, err := Parse(got); err != nil {
			t.Errorf("Drop(%d) is not a valid plan: %v", tc.drop, err)
		}
	}
	if _, err := p.Drop(4); err == nil {
		t.Error("Drop(4) of a 4-call plan succeeded")
	}
	one, _ := Parse(json.RawMessage(`{"rounds":[[{"name":"a","arguments":{}}]]}`))
	if _, err := one.Drop(0); err == nil {
		t.Error("dropping the only call succeeded")
	}
}

func TestRequired(t *testing.T) {
	p, err := Parse(json.RawMessage(`{"rounds":[[{"name":"a","arguments":{},"optional":true},{"name":"b","arguments":{}}],[{"name":"c","arguments":{}}]]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Required(); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("Required() = %v, want [1 2]", got)
	}
}
