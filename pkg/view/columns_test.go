package view

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/record/recordtest"
	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// The columns read into the table are the records record.ReadParquet reads (parquet-go's row
// reader, another path), over several row groups, maps with and without entries, failures.
func TestParquetColumns(t *testing.T) {
	dir := t.TempDir()
	w, err := record.NewParquetWriter(filepath.Join(dir, rundir.ParquetFile), record.ParquetOptions{RowGroupSize: 700})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2500
	for i := range n {
		r := recordtest.Realistic(i)
		switch i % 97 {
		case 5:
			r.TaskFields = nil // a row without task fields
		case 6:
			r.RewardComponents = map[string]float64{}
		case 7:
			r.TaskFields = map[string]string{"note": "a=b, c=\"d\"", "": "empty key"}
		}
		if err := w.Write(&record.Result{Record: r}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want, err := record.ReadParquet(filepath.Join(dir, rundir.ParquetFile))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Load([]string{dir}, Options{StatsSet: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.Rollouts() != n || len(want) != n {
		t.Fatalf("%d rows, %d records, want %d", d.Rollouts(), len(want), n)
	}
	for i := range want {
		got, w := d.record(i), want[i]
		// The columns the table does not keep.
		w.Agent, w.Model, w.ToolNames, w.Attempts, w.StartedAt, w.Seed, w.SourceLine, w.RewardComponents = got.Agent, got.Model, got.ToolNames, got.Attempts, got.StartedAt, got.Seed, got.SourceLine, nil
		if len(w.TaskFields) == 0 && len(got.TaskFields) == 0 {
			w.TaskFields = got.TaskFields
		}
		if diff := recordtest.Diff(got, w); diff != "" {
			t.Fatalf("row %d: %s", i, diff)
		}
		if !maps.Equal(got.TaskFields, w.TaskFields) {
			t.Fatalf("row %d: task fields %v, want %v", i, got.TaskFields, w.TaskFields)
		}
		comps := pairs(want[i].RewardComponents, func(v float64) string { return exact(v) })
		if c := d.s.get(d.rows[i].comps); c != comps {
			t.Fatalf("row %d: components %q, want %q", i, c, comps)
		}
	}
	// Evaluated from the table, the statistics are report.Evaluate's of the records.
	o := report.StatsOptions{GroupBy: "category", Seed: 3}
	d, err = Load([]string{dir}, Options{Stats: o, StatsSet: true})
	if err != nil {
		t.Fatal(err)
	}
	var got, exp bytes.Buffer
	d.Evaluation.WriteJSON(&got)
	report.Evaluate(want, o).WriteJSON(&exp)
	if got.String() != exp.String() || !strings.Contains(got.String(), `"group": "finance"`) {
		t.Errorf("evaluation from the table:\n%.600s\nwant report.Evaluate's:\n%.600s", got.String(), exp.String())
	}
	// A file that is not Parquet: the error names it.
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, rundir.ParquetFile), []byte("PAR1 not really"), 0o644)
	if _, err := Load([]string{bad}, Options{}); err == nil || !strings.Contains(err.Error(), filepath.Join(bad, rundir.ParquetFile)) {
		t.Errorf("a broken Parquet file: %v", err)
	}
}
