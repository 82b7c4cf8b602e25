package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/redistest"
	"github.com/rollout-dev/rollout/pkg/claim"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// claimStores are the claim stores a claimed run is tested with: files in --out, and a real
// redis-server.
func claimStores(t *testing.T) map[string][]string {
	return map[string][]string{"files": nil, "redis": {"--claim-store", redistest.Start(t)}}
}

// claimedBy counts, over the processes' stderr, the processes that claimed each shard.
func claimedBy(logs []string) map[string]int {
	n := map[string]int{}
	re := regexp.MustCompile(`(?m)^rollout: shard (\d+/\d+): claimed by `)
	for _, l := range logs {
		for _, m := range re.FindAllStringSubmatch(l, -1) {
			n[m[1]]++
		}
	}
	return n
}

// Four rollout processes claim the 7 shards of one run at once: each shard is claimed by one
// of them and run once, every shard is marked done, every process exits 0, and the merge of
// the 7 directories is the run one process makes of the whole job.
func TestClaimedShardsRunOnceEach(t *testing.T) {
	bin := buildRollout(t)
	input := headLines(t, extractionData, 14)
	single := filepath.Join(t.TempDir(), "single")
	if r := runCLI(t, context.Background(), nil, shardJob(input, single)...); r.code != 0 {
		t.Fatalf("single process: exit %d: %s", r.code, r.stderr)
	}
	for name, store := range claimStores(t) {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run")
			var logs []string
			var waits []<-chan error
			var errs []*strings.Builder
			for range 4 {
				_, stderr, waited := startRollout(t, bin, shardJob(input, out, append([]string{"--shard", "claim/7", "--claim-lease", "5s"}, store...)...)...)
				waits, errs = append(waits, waited), append(errs, stderr)
			}
			for p, w := range waits {
				if err := <-w; err != nil {
					t.Errorf("process %d: %v\n%s", p, err, errs[p])
				}
				logs = append(logs, errs[p].String())
			}
			by := claimedBy(logs)
			for i := range 7 {
				if n := by[fmt.Sprintf("%d/7", i)]; n != 1 {
					t.Errorf("shard %d/7 claimed %d times, want once:\n%s", i, n, strings.Join(logs, "\n"))
				}
				if done, what, err := claim.Done(claimsDir(out), i); !done || err != nil || !strings.HasPrefix(what, "exit 0 by ") {
					t.Errorf("shard %d/7: done mark %v %q %v", i, done, what, err)
				}
			}
			merged := filepath.Join(t.TempDir(), "merged")
			if r := runCLI(t, context.Background(), nil, "merge", "--out", merged, filepath.Join(out, "shard-*")); r.code != 0 {
				t.Fatalf("merge: exit %d: %s", r.code, r.stderr)
			}
			sameResults(t, merged, single, 14*2*2, nil)
			// Run again, every shard done: nothing is claimed, exit 0.
			again := runCLI(t, context.Background(), nil, shardJob(input, out, append([]string{"--shard", "claim/7"}, store...)...)...)
			if again.code != 0 || strings.Contains(again.stderr, "claimed by") || !strings.Contains(again.stderr, "every one of the 7 shards is done (this process ran -)") {
				t.Errorf("again: exit %d: %s", again.code, again.stderr)
			}
		})
	}
}

// A process killed with -9 in the middle of its shard: its claim is not renewed, and once the
// lease has lapsed another process takes the shard over and resumes it from its journal;
// every rollout of the run is recorded once, and the merge is the single process's run.
func TestClaimedShardTakenOverAfterKill(t *testing.T) {
	bin := buildRollout(t)
	input := headLines(t, extractionData, 14)
	slow := []string{"--sim-latency", "40ms", "--concurrency", "2"}
	single := filepath.Join(t.TempDir(), "single")
	if r := runCLI(t, context.Background(), nil, shardJob(input, single, slow...)...); r.code != 0 {
		t.Fatalf("single process: exit %d: %s", r.code, r.stderr)
	}
	for name, store := range claimStores(t) {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "run")
			args := shardJob(input, out, append(append([]string{"--shard", "claim/3", "--claim-lease", "2s"}, slow...), store...)...)
			a, aerr, awaited := startRollout(t, bin, args...)
			shard0 := shardDir(out, 0)
			for rundir.JournalLines(shard0) < 4 {
				select {
				case err := <-awaited:
					t.Fatalf("the first process ended (%v) before it could be killed: %s", err, aerr)
				case <-time.After(5 * time.Millisecond):
				}
			}
			a.Process.Signal(syscall.SIGKILL)
			if err := <-awaited; err == nil || err.(*exec.ExitError).Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the first process: %v, want killed", err)
			}
			killedAt := rundir.JournalLines(shard0)
			if done, _, _ := claim.Done(claimsDir(out), 0); done || killedAt >= 20 {
				t.Fatalf("shard 0 was done (%d records) before the kill", killedAt)
			}
			_, berr, bwaited := startRollout(t, bin, args...)
			if err := <-bwaited; err != nil {
				t.Fatalf("the second process: %v\n%s", err, berr)
			}
			log := berr.String()
			if claimedBy([]string{log})["0/3"] != 1 || !strings.Contains(log, "rollout: resuming "+shard0) {
				t.Errorf("the second process did not take shard 0 over and resume it:\n%s", log)
			}
			// The killed process's records are kept, none is run twice: 5 tasks, 2 repeats, 2 arms.
			seen := map[record.Key]bool{}
			for _, r := range readRecords(t, shard0) {
				if seen[r.Key()] || r.TaskIndex%3 != 0 {
					t.Errorf("shard 0: record %v twice, or not of shard 0", r.Key())
				}
				seen[r.Key()] = true
			}
			if n := rundir.JournalLines(shard0); len(seen) != 20 || n != 20 {
				t.Errorf("shard 0: %d rollouts, %d journal lines; want 20", len(seen), n)
			}
			if store == nil {
				if _, err := os.Stat(filepath.Join(claimsDir(out), "shard-0.claim-1")); err != nil {
					t.Errorf("the takeover is not the second claim of shard 0: %v", err)
				}
			}
			merged := filepath.Join(t.TempDir(), "merged")
			if r := runCLI(t, context.Background(), nil, "merge", "--out", merged, filepath.Join(out, "shard-*")); r.code != 0 {
				t.Fatalf("merge: exit %d: %s", r.code, r.stderr)
			}
			sameResults(t, merged, single, 14*2*2, nil)
			t.Logf("killed after %d of shard 0's 20 records; taken over and resumed", killedAt)
		})
	}
}

// Settings claim mode cannot take: one line naming the flag, exit 2, nothing written.
func TestClaimFlagsRefused(t *testing.T) {
	input := headLines(t, extractionData, 4)
	out := filepath.Join(t.TempDir(), "run")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--shard", "claim/0"}, `--shard "claim/0": M "0" is not a count of shards`},
		{[]string{"--shard", "claim/4", "--overwrite"}, "--overwrite would delete the other processes' shards"},
		{[]string{"--shard", "claim/4", "--claim-store", "http://redis:6379"}, "--claim-store http://redis:6379: want redis://"},
		{[]string{"--shard", "claim/4", "--claim-lease", "10ms"}, "--claim-lease 10ms: want 1s or more"},
		{[]string{"--shard", "claim/4", "--jsonl-out", filepath.Join(t.TempDir(), "x.jsonl")}, "give it to rollout merge --jsonl-out instead"},
		{[]string{"--shard", "1/4", "--claim-store", "redis://r:6379/0"}, "--claim-store goes with --shard claim/M"},
	} {
		r := runCLI(t, context.Background(), nil, shardJob(input, out, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%q: exit %d: %q, want %q", c.args, r.code, r.stderr, c.want)
		}
	}
	// A Redis URL that is not one: exit 2, the password not shown.
	r := runCLI(t, context.Background(), nil, shardJob(input, out, "--shard", "claim/4", "--claim-store", "redis://:sekrit@redis:port/0")...)
	if r.code != 2 || !strings.Contains(r.stderr, "--claim-store: not a Redis URL") || strings.Contains(r.stderr, "sekrit") {
		t.Errorf("a bad Redis URL: exit %d: %q", r.code, r.stderr)
	}
	// A Redis that does not answer: exit 5 (infrastructure), the password not shown.
	r = runCLI(t, context.Background(), nil, shardJob(input, out, "--shard", "claim/4", "--claim-store", "redis://:sekrit@127.0.0.1:1/0")...)
	if r.code != exitTransient || !strings.Contains(r.stderr, "--claim-store: claim store redis://:xxxxx@127.0.0.1:1/0: connect to Redis") || strings.Contains(r.stderr, "sekrit") {
		t.Errorf("a Redis that does not answer: exit %d: %q", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "shard-0")); err == nil {
		t.Errorf("a refused run wrote %s", out)
	}
}

// The exit codes of a claimed run. The model down: every shard ends with transient failures
// only, each is released (not marked done) and the process exits 5; the same command with the
// model up resumes every shard and exits 0. A shard with a failure of the model's own past
// --fail-on-error is marked done (exit 4, not run again), while the transient ones are left:
// the process exits 4, and the next one runs only those.
func TestClaimedExitCodes(t *testing.T) {
	var mode atomic.Value
	mode.Store("down")
	m := modeModel(t, &mode)
	input := weatherRows(t, 3, "")
	run := func(out string) result {
		return runCLI(t, context.Background(), nil, "run", "--input", input, "--out", out, "--model-url", m.URL+"/v1", "--model", "m",
			"--server", "builtin:example_single_tool_call", "--retries", "0", "--quiet", "--shard", "claim/3")
	}
	done := func(out string) (marks []string) {
		for i := range 3 {
			if ok, what, _ := claim.Done(claimsDir(out), i); ok {
				marks = append(marks, fmt.Sprintf("%d: %s", i, strings.Fields(what)[1]))
			}
		}
		return marks
	}

	out := filepath.Join(t.TempDir(), "run")
	r := run(out)
	if r.code != exitTransient || !strings.Contains(r.stderr, "shards 0/3, 1/3, 2/3 ended with transient failures only") || len(done(out)) > 0 {
		t.Fatalf("model down: exit %d, done %v: %s", r.code, done(out), r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(claimsDir(out), "shard-1.claim-0")); string(b) != "released\n" {
		t.Errorf("shard 1's claim after a transient end: %q, want it released", b)
	}
	mode.Store("up")
	r = run(out)
	if r.code != exitOK || strings.Count(r.stderr, "rollout: resuming") != 3 || !slices.Equal(done(out), []string{"0: 0", "1: 0", "2: 0"}) {
		t.Fatalf("model up: exit %d, done %v: %s", r.code, done(out), r.stderr)
	}

	out = filepath.Join(t.TempDir(), "run")
	mode.Store("bad-w0")
	r = run(out)
	if r.code != exitFailures || !slices.Equal(done(out), []string{"0: 4"}) {
		t.Fatalf("a model_error in shard 0: exit %d, done %v: %s", r.code, done(out), r.stderr)
	}
	mode.Store("up")
	r = run(out)
	if r.code != exitOK || claimedBy([]string{r.stderr})["0/3"] != 0 || claimedBy([]string{r.stderr})["1/3"] != 1 {
		t.Fatalf("again: exit %d: %s", r.code, r.stderr)
	}
	if recs := readRecords(t, shardDir(out, 0)); len(recs) != 1 || recs[0].FailureClass != record.FailModelError {
		t.Errorf("shard 0 (done with exit 4) was run again: %+v", recs)
	}
}

// A holder that is only late (stopped with SIGSTOP past its lease, as a paused VM or a hung
// volume would): a second process takes its shard over, but the directory's lock keeps it from
// writing beside the late one; once the late holder goes on, it finds its claim taken over at
// its next renewal and stops its run, and the shard is finished by one of them: every rollout
// recorded once, both processes exit 0.
func TestClaimedLateHolderStops(t *testing.T) {
	bin := buildRollout(t)
	input := headLines(t, extractionData, 8)
	out := filepath.Join(t.TempDir(), "run")
	args := shardJob(input, out, "--shard", "claim/2", "--claim-lease", "1s", "--sim-latency", "40ms", "--concurrency", "2")
	a, aerr, awaited := startRollout(t, bin, args...)
	shard0 := shardDir(out, 0)
	for rundir.JournalLines(shard0) < 4 {
		select {
		case err := <-awaited:
			t.Fatalf("the first process ended (%v) before it could be stopped: %s", err, aerr)
		case <-time.After(5 * time.Millisecond):
		}
	}
	a.Process.Signal(syscall.SIGSTOP)
	_, berr, bwaited := startRollout(t, bin, args...)
	// The second process runs shard 1, then takes shard 0 over once the lease has lapsed: the
	// claim's second generation.
	deadline := time.Now().Add(time.Minute)
	for _, err := os.Stat(filepath.Join(claimsDir(out), "shard-0.claim-1")); err != nil; _, err = os.Stat(filepath.Join(claimsDir(out), "shard-0.claim-1")) {
		if time.Now().After(deadline) {
			t.Fatalf("the second process never took shard 0 over:\n%s", berr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	a.Process.Signal(syscall.SIGCONT)
	if err := <-awaited; err != nil {
		t.Fatalf("the late process: %v\n%s", err, aerr)
	}
	if err := <-bwaited; err != nil {
		t.Fatalf("the second process: %v\n%s", err, berr)
	}
	if !strings.Contains(aerr.String(), "rollout: the claim of this shard lapsed and another process took it over: no new rollouts") ||
		!strings.Contains(aerr.String(), "rollout: shard 0/2: its lease lapsed and another process took it over") || strings.Contains(aerr.String(), "interrupted") {
		t.Errorf("the late process did not see its claim taken over:\n%s", aerr)
	}
	seen := map[record.Key]bool{}
	for _, r := range readRecords(t, shard0) {
		if seen[r.Key()] {
			t.Errorf("shard 0: record %v twice", r.Key())
		}
		seen[r.Key()] = true
	}
	if n := rundir.JournalLines(shard0); len(seen) != 16 || n != 16 {
		t.Errorf("shard 0: %d rollouts, %d journal lines; want 16 (4 tasks, 2 repeats, 2 arms)", len(seen), n)
	}
	t.Logf("late:\n%s\nsecond:\n%s", aerr, berr)
	if r := runCLI(t, context.Background(), nil, "merge", "--out", filepath.Join(t.TempDir(), "merged"), filepath.Join(out, "shard-*")); r.code != 0 {
		t.Fatalf("merge: exit %d: %s", r.code, r.stderr)
	}
}
