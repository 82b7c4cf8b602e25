package export_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/export"
)

// duckdbNode returns node and the environment under which require('@duckdb/node-api')
// resolves, or skips the test saying why. ROLLOUT_DUCKDB_NODE_PATH names a node_modules
// directory that holds the package (npm install @duckdb/node-api there); else NODE_PATH is
// used as it is. Under CI=true (.ci/run installs the package) a missing reader fails the test
// instead of skipping it.
func duckdbNode(t *testing.T) (string, []string) {
	t.Helper()
	skip := t.Skip
	if os.Getenv("CI") == "true" {
		skip = t.Fatal
	}
	node, err := exec.LookPath("node")
	if err != nil {
		skip("DuckDB check cannot run: node is not installed (the parquet-go read-back in TestRLParquet still runs)")
	}
	env := os.Environ()
	if p := os.Getenv("ROLLOUT_DUCKDB_NODE_PATH"); p != "" {
		env = append(env, "NODE_PATH="+p)
	}
	cmd := exec.Command(node, "-e", "require.resolve('@duckdb/node-api')")
	cmd.Env = env
	if err := cmd.Run(); err != nil {
		skip("DuckDB check cannot run: node cannot require @duckdb/node-api (npm install @duckdb/node-api in a directory, then set ROLLOUT_DUCKDB_NODE_PATH=DIR/node_modules)")
	}
	return node, env
}

// DuckDB, a reader we did not write, reads the rl Parquet export without custom code: the
// nested columns have the types data tools expect (lists of structs, INTEGER[] and FLOAT[]
// token arrays, a list of name/value components), and the values are the JSONL export's.
func TestRLParquetDuckDB(t *testing.T) {
	duckdbNode(t)
	dir := writeRun(t, 3, baseRun)
	out := t.TempDir()
	pq, js := filepath.Join(out, "rl.parquet"), filepath.Join(out, "rl.jsonl")
	exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatRL, Output: pq})
	exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatRL, Output: js})

	raw := runDuckDB(t, "testdata/duckdb_read.js", pq)
	var got struct {
		Types []struct{ Column_name, Column_type string }
		Rows  []struct {
			TaskID     string    `json:"task_id"`
			Repeat     string    `json:"repeat"` // BIGINT comes as text
			Arm        string    `json:"arm"`
			Reward     float64   `json:"reward"`
			Advantage  float64   `json:"advantage"`
			Accuracy   float64   `json:"accuracy"`
			Roles      []string  `json:"roles"`
			Contents   []string  `json:"contents"`
			Arguments  []string  `json:"arguments"`
			Generated  []string  `json:"generated"`
			IDs        []int32   `json:"ids"`
			LogProbs   []float32 `json:"log_probs"`
			ToolsCount string    `json:"tools"`
		}
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	types := map[string]string{}
	for _, c := range got.Types {
		types[c.Column_name] = c.Column_type
	}
	for col, want := range map[string]string{
		"reward_components": `STRUCT("name" VARCHAR, "value" DOUBLE)[]`,
		"messages":          `STRUCT("role" VARCHAR, "content" VARCHAR, tool_calls STRUCT(id VARCHAR, "type" VARCHAR, "function" STRUCT("name" VARCHAR, arguments VARCHAR))[], tool_call_id VARCHAR, reasoning_content VARCHAR)[]`,
		"calls":             "STRUCT(prompt_token_ids INTEGER[], generation_token_ids INTEGER[], generation_log_probs FLOAT[])[]",
		"advantage":         "DOUBLE", "group_size": "BIGINT", "tools": "VARCHAR",
	} {
		if types[col] != want {
			t.Errorf("DuckDB reads %s as %s, want %s", col, types[col], want)
		}
	}
	want := readJSONL[rlLine](t, js)
	if len(got.Rows) != len(want) {
		t.Fatalf("DuckDB read %d rows, JSONL has %d", len(got.Rows), len(want))
	}
	for i, g := range got.Rows {
		w := want[i]
		var roles, contents, args []string
		for _, m := range w.Messages {
			roles = append(roles, m.Role)
			contents = append(contents, m.Content)
			for _, tc := range m.ToolCalls {
				args = append(args, tc.Function.Arguments)
			}
		}
		var ids []int32
		var lps []float32
		for _, c := range w.Calls {
			ids = append(ids, c.GenerationTokenIDs...)
			lps = append(lps, c.GenerationLogProbs...)
		}
		if g.TaskID != w.TaskID || g.Arm != w.Arm || g.Reward != w.Reward || g.Advantage != w.Advantage || g.Accuracy != componentOf(w.RewardComponents, "accuracy") ||
			!slices.Equal(g.Roles, roles) || !slices.Equal(g.Contents, contents) || !slices.Equal(g.Arguments, args) ||
			!slices.Equal(g.IDs, ids) || !slices.Equal(g.LogProbs, lps) || g.ToolsCount != "1" {
			t.Errorf("row %d: DuckDB %+v\nJSONL %+v", i, g, w)
		}
	}
}

// DuckDB reads every format's and layout's Parquet export (every column type the exports write:
// strings, int64, int32 and float lists, doubles, nullable strings, lists of structs, nested
// structs),
// with no MAP column, and each row equals the JSONL export's row once the values that are
// JSON text in Parquet (tools, the chat shape's tool-call arguments) are parsed.
func TestAllFormatsParquetDuckDB(t *testing.T) {
	dir := writeRun(t, 3, baseRun)
	for _, tc := range parquetExports {
		t.Run(tc.format+tc.layout, func(t *testing.T) {
			out := t.TempDir()
			pq, js := filepath.Join(out, "x.parquet"), filepath.Join(out, "x.jsonl")
			exportTo(t, tc.options(dir, pq))
			exportTo(t, tc.options(dir, js))
			cols, rows := duckdbRows(t, pq)
			for name, typ := range cols {
				if strings.Contains(typ, "MAP(") {
					t.Errorf("column %s is %s", name, typ)
				}
			}
			want := readJSONL[json.RawMessage](t, js)
			if len(rows) != len(want) || len(want) == 0 {
				t.Fatalf("DuckDB read %d rows, JSONL has %d", len(rows), len(want))
			}
			for i := range want {
				row, _ := json.Marshal(rows[i])
				if a, b := normalJSON(t, row), normalJSON(t, want[i]); a != b {
					t.Errorf("row %d:\nDuckDB %s\nJSONL  %s", i, a, b)
				}
			}
		})
	}
}

// duckdbRows reads a Parquet file with DuckDB (testdata/duckdb_all.js), which gives a struct
// column as pandas does (every member, null where there is none): its columns' types by name
// and each row's columns.
func duckdbRows(t *testing.T, path string) (map[string]string, []map[string]json.RawMessage) {
	t.Helper()
	raw := runDuckDB(t, "testdata/duckdb_all.js", path)
	var got struct {
		Types []struct{ Column_name, Column_type string }
		Rows  []string
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%v: %.300s", err, raw)
	}
	cols := map[string]string{}
	for _, c := range got.Types {
		cols[c.Column_name] = c.Column_type
	}
	rows := make([]map[string]json.RawMessage, len(got.Rows))
	for i, r := range got.Rows {
		if err := json.Unmarshal([]byte(r), &rows[i]); err != nil {
			t.Fatal(err)
		}
	}
	return cols, rows
}

// parquetExport is a format and layout that can be written as Parquet.
type parquetExport struct{ format, layout string }

// parquetExports is every format and layout that writes Parquet.
var parquetExports = []parquetExport{
	{export.FormatRL, ""}, {export.FormatSFT, ""}, {export.FormatSFT, export.LayoutText}, {export.FormatSFT, export.LayoutVerl}, {export.FormatPreference, ""},
	{export.FormatPreference, export.LayoutNemoRL}, {export.FormatVerl, ""},
}

// options exports dir to output in this format and layout (the text layout with the Qwen2.5
// template, verl's with Qwen3's, under which tool calls render from Parquet).
func (p parquetExport) options(dir, output string) export.Options {
	opt := export.Options{Dirs: []string{dir}, Format: p.format, Layout: p.layout, Output: output}
	switch p.layout {
	case export.LayoutText:
		opt.ChatTemplate = qwen25
	case export.LayoutVerl:
		opt.ChatTemplate = qwen3
	}
	return opt
}

// normalJSON is v with every string that holds a JSON object or array parsed (JSON text in
// Parquet, the value in JSONL), numbers as float64, keys sorted.
func normalJSON(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	var walk func(any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			if strings.HasPrefix(x, "{") || strings.HasPrefix(x, "[") {
				var inner any
				if json.Unmarshal([]byte(x), &inner) == nil {
					return walk(inner)
				}
			}
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		case map[string]any:
			for k := range x {
				x[k] = walk(x[k])
			}
		}
		return v
	}
	out, _ := json.Marshal(walk(v))
	return string(out)
}

// The nemo-gym Parquet file is one string column, line, each row NeMo Gym's JSON line as the
// JSONL export writes it: DuckDB reads it with no MAP and one type.
func TestNemoGymParquetDuckDB(t *testing.T) {
	dir := writeRun(t, 3, baseRun)
	out := t.TempDir()
	pq, js := filepath.Join(out, "x.parquet"), filepath.Join(out, "x.jsonl")
	exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatNemoGym, Output: pq})
	exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatNemoGym, Output: js})
	cols, rows := duckdbRows(t, pq)
	if len(cols) != 1 || cols["line"] != "VARCHAR" {
		t.Fatalf("columns %v", cols)
	}
	want := readJSONL[json.RawMessage](t, js)
	if len(rows) != len(want) || len(want) == 0 {
		t.Fatalf("DuckDB read %d rows, JSONL has %d", len(rows), len(want))
	}
	for i, r := range rows {
		var line string
		if err := json.Unmarshal(r["line"], &line); err != nil {
			t.Fatalf("row %d: line is not text: %s", i, r["line"])
		}
		if a, b := normalJSON(t, []byte(line)), normalJSON(t, want[i]); a != b {
			t.Errorf("row %d:\nParquet %s\nJSONL   %s", i, a, b)
		}
	}
}

// runDuckDB runs a DuckDB script of testdata on a Parquet file and returns what it printed.
func runDuckDB(t *testing.T, script, path string) []byte {
	t.Helper()
	node, env := duckdbNode(t)
	cmd := exec.Command(node, script, path)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("duckdb: %v\n%s", err, stderr.String())
	}
	return raw
}
