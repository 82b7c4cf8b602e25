package runner

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// The shards of a run are a partition of its rollouts: every (task, repeat) is run by exactly
// one shard, the one of index task mod N, with all its repeats; a shard past the tasks runs
// nothing and ends without error.
func TestShardsPartitionTheRun(t *testing.T) {
	model := httptest.NewServer(chatModel(1))
	defer model.Close()
	server := httptest.NewServer(newSessionServer())
	defer server.Close()
	rows := writeRows(t, 7)
	for _, n := range []int{1, 3, 10} {
		seen := map[[2]int64]int{}
		for i := range n {
			o := options(t, model.URL, server.URL, rows, 4)
			o.Shard = Shard{Index: i, Count: n}
			out := &memOutput{}
			rep, err := Run(context.Background(), o, []Output{out})
			if err != nil {
				t.Fatalf("shard %d/%d: %v", i, n, err)
			}
			want := o.Shard.Tasks(7) * 2
			if rep.Started != want || len(out.res) != want {
				t.Errorf("shard %d/%d: started %d, results %d, want %d", i, n, rep.Started, len(out.res), want)
			}
			for _, r := range out.res {
				if int(r.Record.TaskIndex)%n != i {
					t.Errorf("shard %d/%d ran task %d", i, n, r.Record.TaskIndex)
				}
				seen[[2]int64{r.Record.TaskIndex, r.Record.RolloutIndex}]++
			}
		}
		if len(seen) != 14 {
			t.Errorf("%d shards ran %d rollouts, want 14", n, len(seen))
		}
		for k, c := range seen {
			if c != 1 {
				t.Errorf("%d shards: rollout %v ran %d times", n, k, c)
			}
		}
	}
}

func TestShardTasks(t *testing.T) {
	for _, tc := range []struct {
		s       Shard
		n, want int
	}{
		{Shard{}, 5, 5}, {Shard{0, 1}, 5, 5}, {Shard{0, 2}, 5, 3}, {Shard{1, 2}, 5, 2},
		{Shard{3, 4}, 3, 0}, {Shard{2, 4}, 3, 1}, {Shard{0, 4}, 0, 0}, {Shard{3, 4}, 4, 1},
	} {
		// An independent count: the indices below n that the shard has.
		brute := 0
		for i := range tc.n {
			if tc.s.Has(i) {
				brute++
			}
		}
		if got := tc.s.Tasks(tc.n); got != tc.want || brute != tc.want {
			t.Errorf("%v of %d tasks: %d (brute force %d), want %d", tc.s, tc.n, got, brute, tc.want)
		}
	}
}

func TestParseShard(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == ShardIndexEnv {
				return v
			}
			return ""
		}
	}
	for _, tc := range []struct {
		arg, env string
		want     Shard
		err      string
	}{
		{"0/4", "", Shard{0, 4}, ""},
		{"3/4", "", Shard{3, 4}, ""},
		{"auto/4", "2", Shard{2, 4}, ""},
		{"0/1", "", Shard{0, 1}, ""},
		{"4/4", "", Shard{}, `index "4": want an integer from 0 to 3`},
		{"-1/4", "", Shard{}, `index "-1"`},
		{"1/0", "", Shard{}, `N "0" is not a count`},
		{"1", "", Shard{}, "want I/N"},
		{"a/b", "", Shard{}, `N "b"`},
		{"auto/4", "", Shard{}, "neither $JOB_COMPLETION_INDEX (Kubernetes sets it in the pods of an Indexed Job) nor $SLURM_ARRAY_TASK_ID"},
		{"auto/4", "7", Shard{}, `index "7" ($JOB_COMPLETION_INDEX): want an integer from 0 to 3`},
		{"auto/4", "x", Shard{}, `index "x" ($JOB_COMPLETION_INDEX)`},
	} {
		got, err := ParseShard(tc.arg, env(tc.env))
		check(t, tc.arg, tc.env, got, err, tc.want, tc.err)
	}
	// Slurm: the array task's id, less the array's first id; an array of another size is
	// refused. JOB_COMPLETION_INDEX, when set, wins.
	for _, tc := range []struct {
		arg  string
		env  map[string]string
		want Shard
		err  string
	}{
		{"auto/4", map[string]string{"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "4"}, Shard{3, 4}, ""},
		{"auto/4", map[string]string{"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"}, Shard{0, 4}, ""},
		{"auto/4", map[string]string{"SLURM_ARRAY_TASK_ID": "2"}, Shard{2, 4}, ""},
		{"auto/4", map[string]string{"SLURM_ARRAY_TASK_ID": "2", "JOB_COMPLETION_INDEX": "1"}, Shard{1, 4}, ""},
		{"auto/4", map[string]string{"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "8"}, Shard{}, "the Slurm array has $SLURM_ARRAY_TASK_COUNT 8 tasks, not 4: give sbatch --array=0-3"},
		{"auto/4", map[string]string{"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "1"}, Shard{}, `index "4" ($SLURM_ARRAY_TASK_ID 5 less $SLURM_ARRAY_TASK_MIN 1): want an integer from 0 to 3`},
		{"auto/4", map[string]string{"SLURM_ARRAY_TASK_ID": "x"}, Shard{}, `$SLURM_ARRAY_TASK_ID "x" is not an integer`},
	} {
		got, err := ParseShard(tc.arg, func(k string) string { return tc.env[k] })
		check(t, tc.arg, fmt.Sprint(tc.env), got, err, tc.want, tc.err)
	}
}

func check(t *testing.T, arg, env string, got Shard, err error, want Shard, wantErr string) {
	t.Helper()
	tc := struct {
		arg, env string
		want     Shard
		err      string
	}{arg, env, want, wantErr}
	{
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.arg, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s (env %q): error %v, want one with %q", tc.arg, tc.env, err, tc.err)
		case got != tc.want:
			t.Errorf("%s: %v, want %v", tc.arg, got, tc.want)
		}
	}
}
