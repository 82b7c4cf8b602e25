package runner

import (
	"fmt"
	"strconv"
	"strings"
)

// Shard is one part of a sharded run: the tasks whose index is Index mod Count, each with all
// its repeats and arms, so that a task's statistics stay whole in one shard. The zero Shard
// (Count 0) is the whole run.
type Shard struct {
	Index int `json:"index"`
	Count int `json:"count"`
}

// ShardIndexEnv is the environment variable --shard auto/N reads the shard's index from: the
// index Kubernetes gives each pod of an Indexed Job.
const ShardIndexEnv = "JOB_COMPLETION_INDEX"

// Sharded reports whether s is a part of a run rather than the whole.
func (s Shard) Sharded() bool { return s.Count > 0 }

// Has reports whether the task at index task belongs to the shard.
func (s Shard) Has(task int) bool { return s.Count <= 1 || task%s.Count == s.Index }

// Tasks is how many of the first n tasks belong to the shard.
func (s Shard) Tasks(n int) int {
	if s.Count <= 1 {
		return n
	}
	if n <= s.Index {
		return 0
	}
	return (n-s.Index-1)/s.Count + 1
}

// String is "I/N" ("" for the whole run).
func (s Shard) String() string {
	if !s.Sharded() {
		return ""
	}
	return strconv.Itoa(s.Index) + "/" + strconv.Itoa(s.Count)
}

// Validate checks that 0 <= Index < Count (or that s is the zero Shard).
func (s Shard) Validate() error {
	if s == (Shard{}) {
		return nil
	}
	if s.Count < 1 || s.Index < 0 || s.Index >= s.Count {
		return fmt.Errorf("shard %d/%d: want I/N with 0 <= I < N", s.Index, s.Count)
	}
	return nil
}

// SlurmArrayEnv is the environment variable --shard auto/N reads the shard's index from when
// ShardIndexEnv is not set: the task id Slurm gives each task of a job array (sbatch
// --array), less $SLURM_ARRAY_TASK_MIN, so that --array=1-4 is shards 0 to 3 too.
const SlurmArrayEnv = "SLURM_ARRAY_TASK_ID"

// ParseShard reads "I/N" or "auto/N", where auto is the integer in the environment variable
// ShardIndexEnv (a Kubernetes Indexed Job's pod) or else SlurmArrayEnv (a Slurm array task),
// which getenv looks up. A Slurm array of another size than N ($SLURM_ARRAY_TASK_COUNT) is
// refused: its tasks would not cover the shards.
func ParseShard(v string, getenv func(string) string) (Shard, error) {
	is, ns, ok := strings.Cut(v, "/")
	if !ok {
		return Shard{}, fmt.Errorf("%q: want I/N (shard I of N, 0 <= I < N) or auto/N (I from $%s or $%s)", v, ShardIndexEnv, SlurmArrayEnv)
	}
	n, err := strconv.Atoi(ns)
	if err != nil || n < 1 {
		return Shard{}, fmt.Errorf("%q: N %q is not a count of shards (an integer >= 1)", v, ns)
	}
	from := ""
	if is == "auto" {
		switch {
		case getenv(ShardIndexEnv) != "":
			is = getenv(ShardIndexEnv)
			from = fmt.Sprintf(" ($%s)", ShardIndexEnv)
		case getenv(SlurmArrayEnv) != "":
			id, err := strconv.Atoi(getenv(SlurmArrayEnv))
			if err != nil {
				return Shard{}, fmt.Errorf("%q: $%s %q is not an integer", v, SlurmArrayEnv, getenv(SlurmArrayEnv))
			}
			from = fmt.Sprintf(" ($%s)", SlurmArrayEnv)
			if m := getenv("SLURM_ARRAY_TASK_MIN"); m != "" {
				lo, err := strconv.Atoi(m)
				if err != nil {
					return Shard{}, fmt.Errorf("%q: $SLURM_ARRAY_TASK_MIN %q is not an integer", v, m)
				}
				id -= lo
				from = fmt.Sprintf(" ($%s %s less $SLURM_ARRAY_TASK_MIN %s)", SlurmArrayEnv, getenv(SlurmArrayEnv), m)
			}
			if c := getenv("SLURM_ARRAY_TASK_COUNT"); c != "" && c != ns {
				return Shard{}, fmt.Errorf("%q: the Slurm array has $SLURM_ARRAY_TASK_COUNT %s tasks, not %d: give sbatch --array=0-%d", v, c, n, n-1)
			}
			is = strconv.Itoa(id)
		default:
			return Shard{}, fmt.Errorf("%q: neither $%s (Kubernetes sets it in the pods of an Indexed Job) nor $%s (Slurm, in the tasks of a job array) is set; give I/N instead", v, ShardIndexEnv, SlurmArrayEnv)
		}
	}
	i, err := strconv.Atoi(is)
	if err != nil || i < 0 || i >= n {
		return Shard{}, fmt.Errorf("%q: index %q%s: want an integer from 0 to %d", v, is, from, n-1)
	}
	return Shard{Index: i, Count: n}, nil
}
