package export_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/rollout-dev/rollout/pkg/export"
)

// What HF datasets (5.0, packaged_modules/json and features.generate_from_arrow_type) makes of
// an export, emulated: pyarrow's JSON reader infers one Arrow type per column over the lines
// (null fits any type, an int widens to a double, objects merge their fields, anything else
// that differs is "JSON parse error: Column(...) changed from ... to ..."), after datasets'
// own first pass (find_mixed_struct_types_field_paths) has re-encoded as Json every field
// whose objects have different key sets, or that mixes objects or lists with scalars. Parquet
// columns are read by their schema, and a MAP has no datasets feature type.

// arrowType is an inferred Arrow type as text: null, bool, int, double, string, list<T>,
// struct<a:T,...> (fields sorted) or json.
func arrowType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			return "double"
		}
		return "int"
	case string:
		return "string"
	case []any:
		t := "null"
		for _, e := range x {
			t = unify(t, arrowType(e))
		}
		return "list<" + t + ">"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + ":" + arrowType(x[k])
		}
		return "struct<" + strings.Join(parts, ",") + ">"
	}
	return "?"
}

// unify merges two inferred types, or returns "conflict: A vs B".
func unify(a, b string) string {
	switch {
	case a == b:
		return a
	case a == "null":
		return b
	case b == "null":
		return a
	case a == "json" || b == "json":
		return "json"
	case (a == "int" && b == "double") || (a == "double" && b == "int"):
		return "double"
	case strings.HasPrefix(a, "list<") && strings.HasPrefix(b, "list<"):
		return "list<" + unify(a[5:len(a)-1], b[5:len(b)-1]) + ">"
	case strings.HasPrefix(a, "struct<") && strings.HasPrefix(b, "struct<"):
		fa, fb := structFields(a), structFields(b)
		for k, t := range fb {
			fa[k] = unify(fa[k], t)
		}
		return structOf(fa)
	}
	return "conflict: " + a + " vs " + b
}

func structFields(t string) map[string]string {
	out := map[string]string{}
	inner := t[len("struct<") : len(t)-1]
	depth, start := 0, 0
	for i := 0; i <= len(inner); i++ {
		if i == len(inner) || (inner[i] == ',' && depth == 0) {
			if part := inner[start:i]; part != "" {
				k, v, _ := strings.Cut(part, ":")
				out[k] = v
			}
			start = i + 1
			continue
		}
		switch inner[i] {
		case '<':
			depth++
		case '>':
			depth--
		}
	}
	return out
}

func structOf(fields map[string]string) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		if fields[k] == "" {
			fields[k] = "null"
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ":" + fields[k]
	}
	return "struct<" + strings.Join(parts, ",") + ">"
}

// mixedPaths is datasets' find_mixed_struct_types_field_paths over the rows: the paths ("/"
// joined, "[]" for a list's items) that datasets stores as Json.
func mixedPaths(rows []any) []string {
	type job struct {
		path    string
		content []any
	}
	var out []string
	queue := []job{{"", rows}}
	for len(queue) > 0 {
		j := queue[0]
		queue = queue[1:]
		var content []any
		for _, x := range j.content {
			if x != nil {
				content = append(content, x)
			}
		}
		if len(content) == 0 {
			continue
		}
		allObj, allList, anyNested := true, true, false
		for _, x := range content {
			_, isObj := x.(map[string]any)
			_, isList := x.([]any)
			allObj = allObj && isObj
			allList = allList && isList
			anyNested = anyNested || isObj || isList
		}
		switch {
		case allObj:
			first := content[0].(map[string]any)
			mixed := len(first) == 0
			for _, x := range content {
				if !sameKeys(x.(map[string]any), first) {
					mixed = true
				}
			}
			if mixed && j.path != "" {
				out = append(out, j.path)
				continue
			}
			fields := map[string]bool{}
			for _, x := range content {
				for k := range x.(map[string]any) {
					fields[k] = true
				}
			}
			for k := range fields {
				var sub []any
				for _, x := range content {
					if v, ok := x.(map[string]any)[k]; ok && v != nil {
						sub = append(sub, v)
					}
				}
				queue = append(queue, job{strings.TrimPrefix(j.path+"/"+k, "/"), sub})
			}
		case allList:
			var sub []any
			for _, x := range content {
				sub = append(sub, x.([]any)...)
			}
			queue = append(queue, job{j.path + "/[]", sub})
		case anyNested:
			out = append(out, j.path)
		}
	}
	sort.Strings(out)
	return out
}

func sameKeys(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

// replaceJSON sets every value at the Json paths to the marker "json" (datasets re-encodes
// them as JSON text in a Json feature).
func replaceJSON(v any, path []string) any {
	if len(path) == 0 {
		if v == nil {
			return nil
		}
		return jsonMarker{}
	}
	switch x := v.(type) {
	case map[string]any:
		if c, ok := x[path[0]]; ok {
			x[path[0]] = replaceJSON(c, path[1:])
		}
	case []any:
		if path[0] == "[]" {
			for i := range x {
				x[i] = replaceJSON(x[i], path[1:])
			}
		}
	}
	return v
}

type jsonMarker struct{}

// datasetsJSONFeatures loads path as datasets' json builder does and returns each column's
// inferred type, the Json paths, and the first conflict ("" for none).
// objects are paths of free-form JSON objects (tool-call arguments in the chat-template shape):
// JSON text in Parquet, Json to datasets when their keys differ across rows, and counted as
// Json here whatever the rows.
func datasetsJSONFeatures(t *testing.T, path string, objects ...string) (map[string]string, []string, string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		rows = append(rows, v)
	}
	paths := append(mixedPaths(rows), objects...)
	cols := map[string]string{}
	for _, r := range rows {
		for _, p := range paths {
			replaceJSON(r, strings.Split(p, "/"))
		}
		for k, v := range r.(map[string]any) {
			var typ string
			if _, ok := v.(jsonMarker); ok {
				typ = "json"
			} else {
				typ = typeWithJSON(v)
			}
			u := unify(orNull(cols[k]), typ)
			if strings.HasPrefix(u, "conflict") || strings.Contains(u, "conflict:") {
				return cols, paths, fmt.Sprintf("column %s: %s", k, u)
			}
			cols[k] = u
		}
	}
	return cols, paths, ""
}

func orNull(s string) string {
	if s == "" {
		return "null"
	}
	return s
}

// typeWithJSON is arrowType with the Json markers as json.
func typeWithJSON(v any) string {
	switch x := v.(type) {
	case jsonMarker:
		return "json"
	case []any:
		t := "null"
		for _, e := range x {
			t = unify(t, typeWithJSON(e))
		}
		return "list<" + t + ">"
	case map[string]any:
		fields := map[string]string{}
		for k, e := range x {
			fields[k] = typeWithJSON(e)
		}
		return structOf(fields)
	}
	return arrowType(v)
}

// parquetType is a Parquet node's type in arrowType's terms (ints and floats of any width as
// int and double, MAP as map<...>); json for a string column of the JSON logical type.
func parquetType(n parquet.Node) string {
	lt := ""
	if l := n.Type().LogicalType(); l != nil {
		lt = l.String()
	}
	switch {
	case lt == "MAP":
		return "map<...>"
	case lt == "LIST":
		elem := n.Fields()[0]
		if len(elem.Fields()) == 1 && !elem.Leaf() {
			elem = elem.Fields()[0]
		}
		return "list<" + parquetType(elem) + ">"
	case !n.Leaf():
		fields := map[string]string{}
		for _, f := range n.Fields() {
			fields[f.Name()] = parquetType(f)
		}
		return structOf(fields)
	case lt == "JSON":
		return "json"
	case lt == "STRING":
		return "string"
	}
	switch n.Type().Kind() {
	case parquet.Boolean:
		return "bool"
	case parquet.Int32, parquet.Int64:
		return "int"
	case parquet.Float, parquet.Double:
		return "double"
	case parquet.ByteArray:
		return "string"
	}
	return "?"
}

// compatible says whether a JSONL column's inferred type is the Parquet column's: nulls
// (a list or field never filled) fit anything, and a Json value (datasets stores it as JSON
// text: pa.json_() over a string) fits a string.
func compatible(jsonl, pq string) bool {
	jsonl = strings.ReplaceAll(jsonl, "json", "string")
	u := unify(jsonl, pq)
	return u == pq && !strings.Contains(u, "conflict")
}

// Every format's and layout's Parquet and JSONL exports of a run load in HF datasets as one table with one
// type per column, and the same types in both: no MAP column (datasets has no feature for it),
// no column that is an array in one file and text in the other, no empty-string tools.
func TestDatasetsLoadable(t *testing.T) {
	dir := writeRun(t, 3, baseRun)
	for _, tc := range parquetExports {
		t.Run(tc.format+tc.layout, func(t *testing.T) {
			out := t.TempDir()
			pq, js := filepath.Join(out, "x.parquet"), filepath.Join(out, "x.jsonl")
			exportTo(t, tc.options(dir, pq))
			exportTo(t, tc.options(dir, js))
			var objects []string
			switch {
			case tc.format == export.FormatSFT && tc.layout == "", tc.layout == export.LayoutVerl:
				objects = []string{"messages/[]/tool_calls/[]/function/arguments"}
			case tc.format == export.FormatPreference:
				lists := []string{"prompt", "chosen", "rejected"}
				if tc.layout == export.LayoutNemoRL {
					lists = []string{"context", "completions/[]/completion"}
				}
				for _, c := range lists {
					objects = append(objects, c+"/[]/tool_calls/[]/function/arguments")
				}
			}
			cols, jsonPaths, conflict := datasetsJSONFeatures(t, js, objects...)
			if conflict != "" {
				t.Fatalf("%s: datasets' JSON reader: %s", js, conflict)
			}
			f, err := os.Open(pq)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, _ := f.Stat()
			pf, err := parquet.OpenFile(f, st.Size())
			if err != nil {
				t.Fatal(err)
			}
			for _, field := range pf.Schema().Fields() {
				pt := parquetType(field)
				if strings.Contains(pt, "map<") {
					t.Errorf("%s: column %s is a MAP, which datasets has no feature type for", pq, field.Name())
				}
				jt, ok := cols[field.Name()]
				if !ok {
					t.Errorf("column %s is in the Parquet file, not in the JSONL", field.Name())
					continue
				}
				if !compatible(jt, pt) {
					t.Errorf("column %s: %s in JSONL (Json paths %v), %s in Parquet", field.Name(), jt, jsonPaths, pt)
				}
			}
			if len(cols) != len(pf.Schema().Fields()) {
				t.Errorf("JSONL columns %v, Parquet %d", cols, len(pf.Schema().Fields()))
			}
			for _, line := range strings.Split(strings.TrimSpace(readFileT(t, js)), "\n") {
				var row map[string]json.RawMessage
				if err := json.Unmarshal([]byte(line), &row); err != nil {
					t.Fatal(err)
				}
				if tools, ok := row["tools"]; ok {
					var s string
					if json.Unmarshal(tools, &s) == nil {
						var v any
						if err := json.Unmarshal([]byte(s), &v); err != nil {
							t.Errorf("tools %s: json.loads fails (TRL): %v", tools, err)
						}
					}
				}
			}
		})
	}
}

func readFileT(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The verl export is what verl's RLHFDataset (verl/utils/dataset/rl_dataset.py) reads of a row:
// prompt, a list of {role, content} messages it renders with the chat template; data_source;
// reward_model with ground_truth; extra_info with index. One row per task: 2 tasks have
// exportable rollouts in baseRun (task 2's row is bad).
func TestVerl(t *testing.T) {
	dir := writeRun(t, 3, baseRun)
	out := filepath.Join(t.TempDir(), "verl.parquet")
	rep := exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatVerl, Output: out})
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		DataSource string `parquet:"data_source"`
		Prompt     []struct {
			Role    string `parquet:"role"`
			Content string `parquet:"content"`
		} `parquet:"prompt,list"`
		RewardModel struct {
			Style       string `parquet:"style"`
			GroundTruth string `parquet:"ground_truth"`
		} `parquet:"reward_model"`
		ExtraInfo struct {
			Index int64  `parquet:"index"`
			Tools string `parquet:"tools"`
		} `parquet:"extra_info"`
	}
	rows := make([]row, pf.NumRows())
	if n, _ := parquet.NewGenericReader[row](pf).Read(rows); n != 2 || rep.Rows != 2 {
		t.Fatalf("%d rows (report %d), want one per task: 2", n, rep.Rows)
	}
	for i, r := range rows {
		var truth map[string]any
		if r.DataSource == "" || len(r.Prompt) != 2 || r.Prompt[1].Role != "user" || r.Prompt[1].Content != fmt.Sprintf("Count to %d.", r.ExtraInfo.Index) ||
			json.Unmarshal([]byte(r.RewardModel.GroundTruth), &truth) != nil || truth["id"] != fmt.Sprintf("t%d", r.ExtraInfo.Index) || !strings.Contains(r.ExtraInfo.Tools, `"count"`) {
			t.Errorf("row %d: %+v", i, r)
		}
	}
}
