package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// checkExactlyOnce fails unless dir's Parquet file, journal and trajectories hold exactly one
// entry for each (task, rollout) of tasks × repeats.
func checkExactlyOnce(t *testing.T, dir string, tasks, repeats int) []record.Record {
	t.Helper()
	recs := readRecords(t, dir)
	seen := map[[2]int64]int{}
	for _, r := range recs {
		seen[[2]int64{r.TaskIndex, r.RolloutIndex}]++
	}
	for task := range tasks {
		for k := range repeats {
			if n := seen[[2]int64{int64(task), int64(k)}]; n != 1 {
				t.Errorf("rollout (%d, %d): %d records, want 1", task, k, n)
			}
		}
	}
	if len(recs) != tasks*repeats {
		t.Errorf("%d records, want %d", len(recs), tasks*repeats)
	}
	for _, name := range []string{rundir.JournalFile, rundir.TrajectoriesFile} {
		if n := strings.Count(readFile(t, filepath.Join(dir, name)), "\n"); n != tasks*repeats {
			t.Errorf("%s: %d lines, want %d", name, n, tasks*repeats)
		}
	}
	return recs
}

// An interrupted run resumes: the resume runs only what has no record, refuses another
// dataset or config unless --force, and --retry-failed runs infrastructure failures again.
func TestRunResume(t *testing.T) {
	input := headLines(t, extractionData, 30)
	dir := t.TempDir()
	base := []string{"run", "--input", input, "--out", dir, "--model-url", "builtin:sim", "--server", "builtin:extraction", "--quiet", "--concurrency", "4"}

	// Interrupt after a few records.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			b, _ := os.ReadFile(filepath.Join(dir, rundir.TrajectoriesFile))
			if strings.Count(string(b), "\n") >= 5 {
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	r := runCLI(t, ctx, nil, append(base, "--sim-latency", "20ms", "--num-repeats", "2")...)
	if r.code != exitInterrupted {
		t.Fatalf("exit %d, want %d: %s", r.code, exitInterrupted, r.stderr)
	}
	first := len(readRecords(t, dir))
	if first == 0 || first >= 60 {
		t.Fatalf("%d records after the interrupt", first)
	}

	// A plain run refuses the directory; a resume with another config is refused with the
	// difference named; --force would take it.
	if r := runCLI(t, context.Background(), nil, append(base, "--sim-latency", "20ms", "--num-repeats", "2")...); r.code != exitUsage || !strings.Contains(r.stderr, "--resume") {
		t.Errorf("rerun without --resume: exit %d: %s", r.code, r.stderr)
	}
	r = runCLI(t, context.Background(), nil, append(base, "--resume", "--sim-latency", "20ms", "--num-repeats", "3")...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "--num-repeats was 2, now 3") {
		t.Errorf("resume with other repeats: exit %d: %s", r.code, r.stderr)
	}
	other := headLines(t, extractionData, 31)
	r = runCLI(t, context.Background(), nil, "run", "--input", other, "--out", dir, "--model-url", "builtin:sim", "--server", "builtin:extraction",
		"--quiet", "--resume", "--sim-latency", "20ms", "--num-repeats", "2")
	if r.code != exitUsage || !strings.Contains(r.stderr, "the input differs") {
		t.Errorf("resume with another input: exit %d: %s", r.code, r.stderr)
	}

	// The resume finishes the run: every rollout exactly once, the summary over all of them.
	r = runCLI(t, context.Background(), nil, append(base, "--resume", "--sim-latency", "20ms", "--num-repeats", "2")...)
	if r.code != 0 {
		t.Fatalf("resume: exit %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, fmt.Sprintf("%d rollouts already have a record", first)) || !strings.Contains(r.stdout, "rollouts         60") {
		t.Errorf("resume output:\n%s\n%s", r.stdout, r.stderr)
	}
	checkExactlyOnce(t, dir, 30, 2)

	// --retry-failed: a run whose model was down for every rollout, then up.
	dir = t.TempDir()
	base = []string{"run", "--input", input, "--out", dir, "--model-url", "builtin:sim", "--server", "builtin:extraction", "--quiet", "--limit", "10", "--retries", "0"}
	r = runCLI(t, context.Background(), nil, append(base, "--sim-http-500", "1")...)
	if r.code != exitTransient { // model_unavailable only
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, rec := range readRecords(t, dir) {
		if rec.FailureClass != "model_unavailable" {
			t.Fatalf("task %d: class %q, want model_unavailable", rec.TaskIndex, rec.FailureClass)
		}
	}
	// Without --retry-failed a resume has nothing to do; with it, the failures run again
	// (the model is fixed: --sim-http-500 0, with --force since the knob changed; a knob not
	// given keeps the run's value).
	r = runCLI(t, context.Background(), nil, append(base, "--resume", "--sim-http-500", "1")...)
	if r.code != exitTransient || !strings.Contains(r.stderr, "10 rollouts already have a record") { // the run's rollouts all failed, transiently
		t.Errorf("plain resume: exit %d: %s", r.code, r.stderr)
	}
	r = runCLI(t, context.Background(), nil, append(base, "--resume", "--retry-failed", "--force", "--sim-http-500", "0")...)
	if r.code != 0 {
		t.Fatalf("retry-failed: exit %d: %s", r.code, r.stderr)
	}
	for _, rec := range checkExactlyOnce(t, dir, 10, 1) {
		if rec.FailureClass != "" || rec.Reward != 1 {
			t.Errorf("task %d after --retry-failed: class %q reward %v", rec.TaskIndex, rec.FailureClass, rec.Reward)
		}
	}

	for _, args := range [][]string{
		{"--resume", "--overwrite"}, {"--force"}, {"--retry-failed"},
	} {
		if r := runCLI(t, context.Background(), nil, append(base, args...)...); r.code != exitUsage {
			t.Errorf("%v: exit %d", args, r.code)
		}
	}
	if r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", t.TempDir(), "--model-url", "builtin:sim", "--server", "builtin:extraction", "--resume"); r.code != exitUsage || !strings.Contains(r.stderr, "no run to resume") {
		t.Errorf("resume of nothing: exit %d: %s", r.code, r.stderr)
	}
}

// kill -9 at random moments, then --resume, again and again: the run ends with exactly one
// record per rollout, none lost, none duplicated. ROLLOUT_KILL_LOOPS sets the number of kills
// (default 6).
func TestKill9Resume(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the binary")
	}
	bin := buildRollout(t)
	kills := 6
	if s := os.Getenv("ROLLOUT_KILL_LOOPS"); s != "" {
		kills, _ = strconv.Atoi(s)
	}
	// More kills need a longer job, so that each run has something left to kill.
	tasks, repeats := 60, 2+kills/4
	input := headLines(t, extractionData, tasks)
	dir := t.TempDir()
	args := []string{"run", "--input", input, "--out", dir, "--model-url", "builtin:sim", "--server", "builtin:extraction",
		"--quiet", "--concurrency", "16", "--num-repeats", strconv.Itoa(repeats), "--sim-latency", "uniform:5ms-40ms", "--sim-profile", "realistic", "--sim-retry-after", "0"}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	killed := 0
	for i := 0; ; i++ {
		a := args
		if i > 0 {
			// =auto, as a retried pod runs it: a kill before the first run wrote its manifest (a
			// slow start on a loaded machine) leaves no run to resume, and the same command starts it.
			a = append(append([]string{}, args...), "--resume=auto")
		}
		cmd, stderr, waited := startRollout(t, bin, a...)
		if killed < kills {
			select {
			case err := <-waited:
				t.Logf("run %d ended before its kill: %v", i, err)
			case <-time.After(time.Duration(100+rng.IntN(900)) * time.Millisecond):
				cmd.Process.Signal(syscall.SIGKILL)
				<-waited
				killed++
				n := strings.Count(readFileOr(filepath.Join(dir, rundir.JournalFile)), "\n")
				t.Logf("kill %d: %d records in the journal", killed, n)
				continue
			}
		} else if err := <-waited; err != nil {
			t.Fatalf("final resume: %v\n%s", err, stderr.String())
		}
		if cmd.ProcessState.ExitCode() == 0 {
			break
		}
		if i > kills+3 {
			t.Fatalf("no clean finish after %d runs: %s", i, stderr.String())
		}
	}
	recs := checkExactlyOnce(t, dir, tasks, repeats)
	for _, r := range recs {
		if !r.HasReward && r.FailureClass == "" {
			t.Errorf("rollout (%d, %d): neither a reward nor a failure class", r.TaskIndex, r.RolloutIndex)
		}
	}
	t.Logf("%d kills, %d records, exactly once", killed, len(recs))
}

func readFileOr(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// The first Ctrl-C drains; a second exits at once, and the run it leaves resumes to exactly
// one record per rollout.
func TestSecondInterruptExitsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and signals the binary")
	}
	bin := buildRollout(t)
	input := headLines(t, extractionData, 40)
	dir := t.TempDir()
	args := []string{"run", "--input", input, "--out", dir, "--model-url", "builtin:sim", "--server", "builtin:extraction",
		"--quiet", "--concurrency", "8", "--sim-latency", "150ms", "--drain-timeout", "1m"}
	cmd, stderr, waited := startRollout(t, bin, args...)
	for strings.Count(readFileOr(filepath.Join(dir, rundir.JournalFile)), "\n") < 2 {
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(os.Interrupt)
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-waited:
		t.Fatalf("the first Ctrl-C ended the run at once (%v); it should drain\n%s", err, stderr.String())
	default:
	}
	sent := time.Now()
	cmd.Process.Signal(os.Interrupt)
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the second Ctrl-C did not exit at once\n%s", stderr.String())
	}
	t.Logf("exited %v after the second Ctrl-C, status %v", time.Since(sent).Round(time.Millisecond), cmd.ProcessState)
	if !strings.Contains(stderr.String(), "Ctrl-C again exits at once") {
		t.Errorf("no interrupt notice: %s", stderr.String())
	}
	out, err := exec.Command(bin, append(args, "--resume", "--concurrency", "40")...).CombinedOutput()
	if err != nil {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	checkExactlyOnce(t, dir, 40, 1)
}

// buildRollout builds the rollout binary once for the tests that run it as a process.
func buildRollout(t *testing.T) string {
	t.Helper()
	builtOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rollout-test-bin-")
		if err != nil {
			builtErr = err
			return
		}
		builtBin = filepath.Join(dir, "rollout")
		if out, err := exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput(); err != nil {
			builtErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if builtErr != nil {
		t.Fatal(builtErr)
	}
	return builtBin
}

var (
	builtOnce sync.Once
	builtBin  string
	builtErr  error
)

// startRollout starts the binary with args; waited receives its exit once, and stderr holds
// what it wrote (read it after waited).
func startRollout(t *testing.T, bin string, args ...string) (cmd *exec.Cmd, stderr *strings.Builder, waited <-chan error) {
	t.Helper()
	cmd = exec.Command(bin, args...)
	stderr = &strings.Builder{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := make(chan error, 1)
	go func() { w <- cmd.Wait() }()
	return cmd, stderr, w
}

// TestMain removes the binary buildRollout built and the attack table's base run, once every
// test is done.
func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		os.RemoveAll(filepath.Dir(builtBin))
	}
	if attackBaseDir != "" {
		os.RemoveAll(attackBaseDir)
	}
	os.Exit(code)
}
