package rundir

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/record/recordtest"
	"github.com/rollout-dev/rollout/pkg/report"
)

// finalize evaluates the journal's records in the pass that writes the Parquet file: the
// same report.Evaluation as report.EvaluateJournal, and the Parquet file holds the records.
func TestFinalizeWithEvaluator(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSink(dir, SinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	for i := range n {
		r := recordtest.Realistic(i)
		if err := s.Write(&record.Result{Record: r, Trajectory: recordtest.Trajectory(i, 200)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	o := report.StatsOptions{GroupBy: "difficulty", Bootstrap: 100}
	sum, got, err := finalize(dir, finalizeOptions{Parquet: record.ParquetOptions{RowGroupSize: 1000}, Stats: o})
	if err != nil {
		t.Fatal(err)
	}
	want, err := report.EvaluateJournal(filepath.Join(dir, JournalFile), o)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(want)
	if sum.Rollouts != n || !bytes.Equal(a, b) {
		t.Errorf("%d rollouts; evaluations differ:\n%s\n%s", sum.Rollouts, a, b)
	}
	recs, err := record.ReadParquet(filepath.Join(dir, ParquetFile))
	if err != nil || len(recs) != n {
		t.Fatalf("parquet: %d records, %v", len(recs), err)
	}
	for i := range recs {
		if d := recordtest.Diff(recs[i], recordtest.Realistic(i)); d != "" {
			t.Fatalf("record %d: %s", i, d)
		}
	}
}
