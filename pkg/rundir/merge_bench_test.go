package rundir

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/benchutil"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/record/recordtest"
)

// BenchmarkMerge times rollout merge of 4 complete shards holding ROLLOUT_BENCH_N realistic
// records between them (10^6 by default; each with a trajectory of about 1 KB): the journals
// and trajectories copied line by line with every record decoded and checked, then
// rollouts.parquet, summary.json and evaluation.json derived from the merged journal.
func BenchmarkMerge(b *testing.B) {
	n := benchN()
	root := b.TempDir()
	input := filepath.Join(root, "tasks.jsonl")
	if err := os.WriteFile(input, []byte("{}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	var dirs []string
	for s := range 4 {
		dir := filepath.Join(root, fmt.Sprintf("shard-%d", s))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		mf, err := NewManifest(input, map[string]int{"num_repeats": 4})
		if err != nil {
			b.Fatal(err)
		}
		j, _ := os.Create(filepath.Join(dir, JournalFile))
		tr, _ := os.Create(filepath.Join(dir, TrajectoriesFile))
		var line []byte
		var keys []string
		written := 0
		for i := range n {
			r := recordtest.Realistic(i)
			if int(r.TaskIndex)%4 != s {
				continue
			}
			line, keys, _ = record.AppendJSON(line[:0], &r, keys)
			j.Write(line)
			written++
			fmt.Fprintf(tr, "{\"task_index\":%d,\"rollout_index\":%d,\"arm\":%q,\"trajectory\":%s}\n", r.TaskIndex, r.RolloutIndex, r.Arm, recordtest.Trajectory(i, 1000))
		}
		j.Close()
		tr.Close()
		mf.Shard, mf.Complete = &Shard{Index: s, Count: 4}, &Completion{At: time.Now(), Rollouts: written}
		if err := WriteManifest(dir, mf); err != nil {
			b.Fatal(err)
		}
		dirs = append(dirs, dir)
	}
	r, err := OpenRun(dirs, OpenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(root, "merged")
	b.ResetTimer()
	cpu := benchutil.ProcessCPU()
	for range b.N {
		fin, err := Merge(out, r, MergeOptions{Overwrite: true})
		if err != nil {
			b.Fatal(err)
		}
		if fin.Summary.Rollouts != n {
			b.Fatalf("%d rollouts merged, want %d", fin.Summary.Rollouts, n)
		}
	}
	b.StopTimer()
	b.ReportMetric((benchutil.ProcessCPU()-cpu).Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
