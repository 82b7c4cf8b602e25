package export_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/internal/hfrender"
	"github.com/rollout-dev/rollout/pkg/export"
)

const qwen3 = "testdata/templates/Qwen3-Instruct-2507.jinja"

// verl's MultiTurnSFTDataset (volcengine/verl b178a3c, verl/utils/dataset/multiturn_sft_dataset.py)
// reads a Parquet file with pandas, and hands each row's messages, and its tools column as it
// is, to the chat template (internal/hfrender's "verl" mode does what it does, with python3's
// jinja2 as transformers sets it up; DuckDB reads the file as pandas gives it).
//
// The default sft Parquet fails there: its tools are JSON text, and transformers refuses tools
// that are not dicts. The verl layout loads as it is (no tools column: the tools block is in the
// system message), and verl's render of each row, message by message, is the conversation as
// the template renders it with its tools (the text layout's text) and verl's mask is the text
// layout's spans. A row verl would refuse (two tool messages in a row: sanity_check) or render
// otherwise (Qwen2.5 writes string arguments as a JSON string) is left out with the reason.
func TestVerlMultiTurnSFT(t *testing.T) {
	py := hfrender.Python(t)
	dir := writeRun(t, 2, varied)
	out := t.TempDir()

	sft := filepath.Join(out, "sft.parquet")
	exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatSFT, Output: sft})
	_, rows := duckdbRows(t, sft)
	var tools any
	if err := json.Unmarshal(rows[0]["tools"], &tools); err != nil {
		t.Fatal(err)
	}
	res, err := hfrender.RunSpans(py, hfrender.Request{Template: qwen3, Messages: rows[0]["messages"], Tools: tools, Mode: "verl"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Error == nil || !strings.Contains(*res.Error, "Tools should either be a JSON schema") {
		t.Errorf("verl takes the sft Parquet's tools %s: %+v", rows[0]["tools"], res)
	}

	verl, text := filepath.Join(out, "verl.parquet"), filepath.Join(out, "text.jsonl")
	rep := exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatSFT, Layout: export.LayoutVerl, ChatTemplate: qwen3, Output: verl})
	exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatSFT, Layout: export.LayoutText, ChatTemplate: qwen3, Output: text})
	if rep.Rows != len(varied)-1 || rep.Dropped[export.DropVerlCheck] != 1 {
		t.Fatalf("report %+v", rep)
	}
	cols, rows := duckdbRows(t, verl)
	if len(cols) != 1 || cols["messages"] == "" {
		t.Errorf("columns %v: verl hands a tools column to the template as it is", cols)
	}
	var want []textRow
	for i, r := range readJSONL[textRow](t, text) {
		if !varied[i].parallel {
			want = append(want, r)
		}
	}
	if len(rows) != len(want) {
		t.Fatalf("%d verl rows, %d text rows", len(rows), len(want))
	}
	for i, row := range rows {
		res, err := hfrender.RunSpans(py, hfrender.Request{Template: qwen3, Messages: row["messages"], Mode: "verl"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Error != nil || res.Text != want[i].Text {
			t.Fatalf("row %d: verl: %v\n%q\nthe conversation as the template renders it:\n%q", i, res.Error, res.Text, want[i].Text)
		}
		if len(res.Trainable) != len(want[i].Spans) {
			t.Fatalf("row %d: verl trains %v, the answers are %+v", i, res.Trainable, want[i].Spans)
		}
		for k, s := range want[i].Spans {
			if res.Trainable[k] != [2]int64{s.Start, s.End} {
				t.Errorf("row %d answer %d: verl trains %v, the answer is %+v", i, k, res.Trainable[k], s)
			}
		}
	}

	// Qwen2.5 writes tool-call arguments with tojson, a string too: verl cannot render them as
	// the model saw them from any Parquet file.
	rep = exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatSFT, Layout: export.LayoutVerl, ChatTemplate: qwen25, Output: filepath.Join(out, "verl25.parquet")})
	if rep.Rows != 0 || rep.Dropped[export.DropVerlRender] != len(varied)-1 {
		t.Errorf("Qwen2.5: report %+v", rep)
	}
}
