package view

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// TestCompareFromTable checks that the compare page's numbers, computed from the view's
// compact table a record at a time, equal report.Compare over the records that parquet-go's
// row reader rebuilds from rollouts.parquet (another path through the file), on the fixture
// run: three repeats of each task, failures on one arm only (tasks only in A or only in B),
// and a task (the hostile one) on one arm only.
func TestCompareFromTable(t *testing.T) {
	dir := fixtureRun(t)
	recs, err := record.ReadParquet(filepath.Join(dir, rundir.ParquetFile))
	if err != nil {
		t.Fatal(err)
	}
	arm := func(name string) []record.Record {
		var out []record.Record
		for _, r := range recs {
			if r.Arm == name {
				out = append(out, r)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		a, b       string
		failZero   bool
		wantOnlyA  bool // the case is not vacuous: tasks only on A's side
		wantOnlyB  bool
		wantUnpair bool
	}{
		{name: "multi vs single", a: "multi", b: "single", wantOnlyA: true, wantOnlyB: true},
		{name: "single vs multi", a: "single", b: "multi", wantOnlyA: true, wantOnlyB: true},
		{name: "failures scored as zero", a: "multi", b: "single", failZero: true, wantOnlyA: true, wantOnlyB: true, wantUnpair: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Load([]string{dir}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			d.Evaluation.Options.ScoreFailuresAsZero = tc.failZero
			page := d.comparison(Side{0, tc.a}, Side{0, tc.b}, serverLinks{})
			got := page.C
			want := report.Compare(arm(tc.a), arm(tc.b), tc.a, tc.b, d.Evaluation.Options)
			if !reflect.DeepEqual(got, want) {
				g, _ := json.MarshalIndent(got, "", " ")
				w, _ := json.MarshalIndent(want, "", " ")
				t.Fatalf("from the table:\n%s\nreport.Compare:\n%s", g, w)
			}
			if want.Won+want.Lost == 0 || want.Pairs == 0 || want.Sides[0].Rollouts == 0 || want.Sides[1].Rollouts == 0 {
				t.Fatalf("nothing compared: %+v", want)
			}
			// The page's tasks (rewards are 0 or 1 here: a change is a win or a loss).
			won := 0
			for _, f := range page.Flipped {
				if f.Won {
					won++
				}
				if f.LinkA == "" || f.LinkB == "" || f.Link == "" {
					t.Errorf("changed task %s without its transcripts' links: %+v", f.Task, f)
				}
			}
			if won != want.Won || len(page.Flipped)-won != want.Lost || page.Scatter.Tasks != want.Tasks || page.Scatter.Shown != want.Tasks {
				t.Errorf("the page lists %d won, %d lost of %d tasks (%d drawn); report.Compare: %d won, %d lost of %d",
					won, len(page.Flipped)-won, page.Scatter.Tasks, page.Scatter.Shown, want.Won, want.Lost, want.Tasks)
			}
			if tc.wantOnlyA && len(want.OnlyA) == 0 || tc.wantOnlyB && len(want.OnlyB) == 0 || tc.wantUnpair && want.Unpaired == 0 {
				t.Errorf("the fixture lost its unpaired tasks: only A %v, only B %v, unpaired %d", want.OnlyA, want.OnlyB, want.Unpaired)
			}
		})
	}
}
