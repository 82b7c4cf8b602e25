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

// ParseShard reads "I/N" or "auto/N", where auto is the integer in the environment variable
// ShardIndexEnv (getenv looks it up).
func ParseShard(v string, getenv func(string) string) (Shard, error) {
	is, ns, ok := strings.Cut(v, "/")
	if !ok {
		return Shard{}, fmt.Errorf("%q: want I/N (shard I of N, 0 <= I < N) or auto/N (I from $%s)", v, ShardIndexEnv)
	}
	n, err := strconv.Atoi(ns)
	if err != nil || n < 1 {
		return Shard{}, fmt.Errorf("%q: N %q is not a count of shards (an integer >= 1)", v, ns)
	}
	from := ""
	if is == "auto" {
		is = getenv(ShardIndexEnv)
		if is == "" {
			return Shard{}, fmt.Errorf("%q: $%s is not set (Kubernetes sets it in the pods of an Indexed Job); give I/N instead", v, ShardIndexEnv)
		}
		from = fmt.Sprintf(" ($%s)", ShardIndexEnv)
	}
	i, err := strconv.Atoi(is)
	if err != nil || i < 0 || i >= n {
		return Shard{}, fmt.Errorf("%q: index %q%s: want an integer from 0 to %d", v, is, from, n-1)
	}
	return Shard{Index: i, Count: n}, nil
}
