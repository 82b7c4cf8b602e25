package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/pkg/rundir"
	"github.com/rollout-dev/rollout/pkg/runner"
)

// rollout run's sharding flags: --shard I/N (or auto/N, I from $JOB_COMPLETION_INDEX) and
// --resume=auto, which resumes the run in --out when there is one and starts it otherwise, so
// that a Kubernetes Job's retried pod runs the same command as the first one.

// resumeFlag is --resume: a boolean that also takes the value auto.
type resumeFlag struct {
	on, auto *bool
}

func (r resumeFlag) IsBoolFlag() bool { return true }

func (r resumeFlag) String() string {
	if r.auto != nil && *r.auto {
		return "auto"
	}
	if r.on != nil && *r.on {
		return "true"
	}
	return "false"
}

func (r resumeFlag) Set(v string) error {
	if v == "auto" {
		*r.on, *r.auto = false, true
		return nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("want true, false or auto")
	}
	*r.on, *r.auto = b, false
	return nil
}

// shardFlags registers --shard and --resume into f.
func shardFlags(fs *flag.FlagSet, f *runFlags) {
	fs.Var(resumeFlag{&f.resume, &f.resumeAuto}, "resume", "finish the run in --out, by its own flags (=auto: if any; else start)")
	fs.StringVar(&f.shardArg, "shard", "", "`I/N`: tasks I mod N; auto/N: I from Job or array; claim/M: take free ones")
	fs.StringVar(&f.claimStore, "claim-store", "", "claim/M's claims in Redis `URL` (default: files in --out/.claims)")
	fs.DurationVar(&f.claimLease, "claim-lease", time.Minute, "claim/M: a dead process's shard is taken over after `D`")
}

// resolveShard reads --shard into f.shard, once --resume has set it from the manifest when it
// was not given; auto/N takes the index from getenv.
func (f *runFlags) resolveShard(getenv func(string) string) error {
	if ms, ok := strings.CutPrefix(f.shardArg, claimPrefix); ok {
		n, err := strconv.Atoi(ms)
		if err != nil || n < 1 {
			return badUsage("--shard %q: M %q is not a count of shards (an integer >= 1)", f.shardArg, ms)
		}
		f.claims = n
		return f.checkClaimFlags()
	}
	if err := f.checkClaimFlags(); err != nil {
		return err
	}
	if f.shardArg != "" {
		s, err := runner.ParseShard(f.shardArg, getenv)
		if err != nil {
			return badUsage("--shard %v", err)
		}
		f.shard = s
	}
	return nil
}

// holdsRun reports whether dir holds a run that --resume=auto resumes: a manifest or records.
func holdsRun(dir string) bool {
	if rundir.HasManifest(dir) {
		return true
	}
	return rundir.JournalLines(dir) > 0
}

// manifestShard is the shard of a run's manifest (nil for a whole run).
func manifestShard(s runner.Shard) *rundir.Shard {
	if !s.Sharded() {
		return nil
	}
	return &rundir.Shard{Index: s.Index, Count: s.Count}
}
