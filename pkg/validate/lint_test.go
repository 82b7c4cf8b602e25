package validate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tasks.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const goodTools = `[{"type":"function","name":"find","parameters":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}},{"type":"function","name":"get","parameters":{"type":"object","properties":{"id":{"type":"integer"}}}}]`

func row(id, tools, extra string) string {
	s := `{"id":` + id + `,"responses_create_params":{"input":"question ` + id + `","tools":` + tools + `}`
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

func TestLint(t *testing.T) {
	plan := `"reference_plan":{"rounds":[[{"name":"find","arguments":{"q":"x"}}],[{"name":"get","arguments":{"id":{"$ref":"0/ids/0"}}}]]}`
	path := writeFile(t,
		row("1", goodTools, plan), // line 1: fine
		row("2", `[{"type":"function","name":"a","parameters":{"type":"strng"}}]`, ""),                 // 2: bad schema
		row("3", `[{"type":"function","name":"a","parameters":{"type":"object","required":"q"}}]`, ""), // 3: bad schema
		row("1", goodTools, ""), // 4: duplicate id
		row("5", goodTools, `"reference_plan":{"rounds":[[{"name":"nope","arguments":{}}]]}`),                                 // 5: unknown tool
		row("6", goodTools, `"reference_plan":{"rounds":[[{"name":"find","arguments":{"q":{"$ref":"0/x"}}}]]}`),               // 6: ref to own round
		`{"id":7,"responses_create_params":{"input":3}}`,                                                                      // 7: bad row
		row("8", `[{"type":"function","name":"find","parameters":{}},{"type":"function","name":"find","parameters":{}}]`, ""), // 8: two tools named find
		`{"id":9,`, // 9: not JSON
	)
	rep, err := Lint(path)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tasks != 9 || rep.Plans != 3 {
		t.Errorf("tasks %d plans %d, want 9 and 3", rep.Tasks, rep.Plans)
	}
	want := map[int]string{
		2: "responses_create_params.tools[0].parameters: not a valid JSON Schema",
		3: "responses_create_params.tools[0].parameters: not a valid JSON Schema",
		4: "id: 1 is also the id of line 1",
		5: `reference_plan.rounds[0][0].name: unknown tool "nope": the row offers find, get`,
		6: `reference_plan: rounds[0][0].arguments.q: reference "0/x": call 0 is not in an earlier round`,
		7: "responses_create_params.input",
		8: `responses_create_params.tools[1].name: duplicate tool name "find"`,
		9: "tasks.jsonl:9:",
	}
	got := map[int]string{}
	for _, p := range rep.Problems {
		if _, dup := got[p.Line]; dup {
			t.Errorf("two problems on line %d: %s", p.Line, p)
		}
		got[p.Line] = p.String()
	}
	for line, w := range want {
		if !strings.Contains(got[line], w) {
			t.Errorf("line %d: got %q, want it to contain %q", line, got[line], w)
		}
		if !strings.HasPrefix(got[line], path+":") {
			t.Errorf("line %d: %q does not start with FILE:LINE", line, got[line])
		}
	}
	if g, ok := got[1]; ok {
		t.Errorf("line 1 is fine, got %q", g)
	}
	if rep.Errors() != len(want) {
		t.Errorf("Errors() = %d, want %d", rep.Errors(), len(want))
	}
}

func TestLintMissingFile(t *testing.T) {
	if _, err := Lint(filepath.Join(t.TempDir(), "nope.jsonl")); err == nil || !strings.Contains(err.Error(), "nope.jsonl") {
		t.Fatalf("err %v, want one naming the file", err)
	}
}
