package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/testnet"
	"github.com/rollout-dev/rollout/pkg/record"
)

// The soak's settings. ROLLOUT_SOAK_ROLLOUTS (default 300) is the number of rollouts,
// ROLLOUT_SOAK_SEED (default 1) the seed of the tasks, the simulator and the chaos, and
// ROLLOUT_SOAK_OUT, when set, a directory that keeps the outputs (else a temporary one).
const (
	shortRollouts = 300
	repeats       = 4   // rollouts per task, at least
	maxTasks      = 500 // distinct tasks, at most
	concurrency   = 256
)

// The faults: per model request (the simulator), per resource-server request (chaos).
var (
	simFaults = []string{"--http-429", "0.10", "--http-500", "0.05", "--connection-reset", "0.02", "--hang", "0.01",
		"--latency", "uniform:5ms-50ms"}
	chaosFaults = []string{"--chaos-fail-rate", "0.05", "--chaos-reset-rate", "0.01", "--chaos-hang-rate", "0.005"}
	runLimits   = []string{"--model-timeout", "2s", "--tool-timeout", "2s", "--rollout-timeout", "60s",
		"--concurrency", strconv.Itoa(concurrency), "--end-sessions"}
)

// knownFailures are the failure classes a record may carry (pkg/report).
var knownFailures = []record.FailureClass{record.FailBadTask, record.FailModelUnavailable, record.FailRateLimited, record.FailModelError,
	record.FailResourceServer, record.FailVerify, record.FailTimeout, record.FailCancelled}

// knownTerminations are the ways a rollout's loop ends (pkg/agent).
var knownTerminations = []string{"completed", "max_rounds", "context_length", "tool_error", "model_error", "verify_error",
	"timeout", "cancelled", "invalid_output"}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// TestSoak runs the real binary as three processes on loopback: `rollout sim` with HTTP 429s
// and 500s, connection resets and hangs; `rollout serve extraction` with chaos (500s, resets,
// hangs); and `rollout run` against both with short timeouts and 256 rollouts in flight. Then
// it accounts for every rollout from rollouts.parquet: exactly one record per (task_index,
// rollout_index), none missing, none duplicated, each with a reward or a known failure class;
// and checks that neither server is left with goroutines of requests whose client is gone.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak: runs the binary for tens of seconds")
	}
	if runtime.GOOS == "windows" {
		t.Skip("soak: stops its servers with SIGINT")
	}
	n, tasks, reps, seed := soakSize(t)
	dir := os.Getenv("ROLLOUT_SOAK_OUT")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	bin := buildBinary(t)
	input := filepath.Join(dir, "tasks.jsonl")
	if out, err := exec.Command(bin, "gen", "extraction", "--n", strconv.Itoa(tasks), "--seed", seed, "-o", input).CombinedOutput(); err != nil {
		t.Fatalf("rollout gen: %v\n%s", err, out)
	}

	simArgs := append([]string{"sim", "--tasks", input, "--seed", seed}, simFaults...)
	simProc := start(t, bin, simArgs...)
	serveArgs := append([]string{"serve", "extraction", "--chaos-seed", seed}, chaosFaults...)
	serveProc := start(t, bin, serveArgs...)

	out := filepath.Join(dir, "out")
	runArgs := append([]string{"run", "--input", input, "--num-repeats", strconv.Itoa(reps), "--out", out, "--overwrite",
		"--model-url", simProc.url, "--model", "rollout-sim", "--server", serveProc.url, "--progress-interval", "10s",
		// The soak injects faults on purpose: what it checks is one record per rollout, not the failure rate.
		"--fail-on-error", "0.5"}, runLimits...)
	t.Logf("rollout %s", strings.Join(simArgs, " "))
	t.Logf("rollout %s", strings.Join(serveArgs, " "))
	t.Logf("rollout %s", strings.Join(runArgs, " "))
	run := exec.Command(bin, runArgs...)
	var runOut, runErr bytes.Buffer
	run.Stdout, run.Stderr = &runOut, &runErr
	begin := time.Now()
	err := run.Run()
	wall := time.Since(begin)
	if err != nil {
		t.Fatalf("rollout run: %v after %v\nstdout:\n%s\nstderr:\n%s", err, wall, runOut.String(), tail(runErr.String(), 4000))
	}

	// Neither server keeps a goroutine for a request whose client went away (a hang, a reset,
	// a client timeout): with the run's process gone, both are back to a handful.
	for _, p := range []*proc{simProc, serveProc} {
		p.checkGoroutines(t)
	}
	simStats, serveStats := simProc.stop(t), serveProc.stop(t)

	recs, err := record.ReadParquet(filepath.Join(out, "rollouts.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	a := account(recs, tasks, reps)
	for _, p := range a.problems {
		t.Error(p)
	}
	if got := countLines(t, filepath.Join(out, "trajectories.jsonl")); got != n {
		t.Errorf("trajectories.jsonl has %d lines, want %d", got, n)
	}
	var sum struct{ Rollouts int }
	if b, err := os.ReadFile(filepath.Join(out, "summary.json")); err != nil || json.Unmarshal(b, &sum) != nil || sum.Rollouts != n {
		t.Errorf("summary.json: %d rollouts (%v), want %d", sum.Rollouts, err, n)
	}

	text := fmt.Sprintf("soak: %d rollouts (%d tasks x %d repeats), concurrency %d, %d CPUs, wall time %s (%.0f rollouts/s)\n",
		n, tasks, reps, concurrency, runtime.NumCPU(), wall.Round(time.Millisecond), float64(n)/wall.Seconds())
	text += fmt.Sprintf("records %d: missing %d, duplicated %d, out of range %d, untyped %d\n",
		len(recs), a.missing, a.duplicated, a.outOfRange, a.untyped)
	text += fmt.Sprintf("scored %d, failed %d (%.2f%%), mean reward %.4f, attempts %d (%.2f per rollout)\n",
		a.scored, a.failed, 100*float64(a.failed)/float64(max(len(recs), 1)), a.meanReward, a.attempts, float64(a.attempts)/float64(max(len(recs), 1)))
	text += "failure classes  " + counts(a.classes) + "\n"
	text += "terminations     " + counts(a.terminations) + "\n"
	for _, c := range knownFailures {
		if e, ok := a.examples[string(c)]; ok {
			text += fmt.Sprintf("  e.g. %s %s\n", c, e)
		}
	}
	text += fmt.Sprintf("peak RSS: run %s, sim %s, serve %s\n", maxRSS(run.ProcessState), maxRSS(simProc.cmd.ProcessState), maxRSS(serveProc.cmd.ProcessState))
	text += simStats + "\n" + serveStats + "\n"
	text += "rollout run stdout:\n" + runOut.String()
	t.Log("\n" + text)
	os.WriteFile(filepath.Join(dir, "soak.txt"), []byte(text), 0o644)

	// The faults really happened, and the retries mostly got through them.
	for _, want := range []string{"HTTP 429", "HTTP 500", "connection resets", "hangs"} {
		if injectedCount(simStats, want) == 0 {
			t.Errorf("the simulator injected no %s: %s", want, simStats)
		}
	}
	if injectedCount(serveStats, "failed (500)") == 0 {
		t.Errorf("chaos injected no 500: %s", serveStats)
	}
	if a.failed*10 > len(recs) {
		t.Errorf("%d of %d rollouts failed: the retries do not get through the faults", a.failed, len(recs))
	}
}

// soakSize is the soak's size from the environment: n rollouts of tasks tasks x reps repeats,
// and the seed. The extraction generator makes a few hundred distinct tasks per seed; beyond
// maxTasks the tasks are repeated more. The count is rounded down to tasks x repeats.
func soakSize(t *testing.T) (n, tasks, reps int, seed string) {
	n = envInt(t, "ROLLOUT_SOAK_ROLLOUTS", shortRollouts)
	seed = strconv.Itoa(envInt(t, "ROLLOUT_SOAK_SEED", 1))
	reps = max(repeats, (n+maxTasks-1)/maxTasks)
	tasks = max(n/reps, 1)
	return tasks * reps, tasks, reps, seed
}

// accounting is what the records say.
type accounting struct {
	problems                                 []string
	missing, duplicated, outOfRange, untyped int
	scored, failed                           int
	meanReward                               float64
	attempts                                 int64
	classes, terminations                    map[string]int
	examples                                 map[string]string // failure class → the error of one record
}

// account checks that recs hold exactly one record per (task, repeat), each with a reward or a
// known failure class, and counts them.
func account(recs []record.Record, tasks, reps int) accounting {
	a := accounting{classes: map[string]int{}, terminations: map[string]int{}, examples: map[string]string{}}
	seen := make([]int, tasks*reps)
	var rewards float64
	problem := func(format string, args ...any) {
		if len(a.problems) < 20 {
			a.problems = append(a.problems, fmt.Sprintf(format, args...))
		}
	}
	for _, r := range recs {
		if r.TaskIndex < 0 || r.TaskIndex >= int64(tasks) || r.RolloutIndex < 0 || r.RolloutIndex >= int64(reps) {
			a.outOfRange++
			problem("record for (%d, %d): out of range", r.TaskIndex, r.RolloutIndex)
			continue
		}
		seen[int(r.TaskIndex)*reps+int(r.RolloutIndex)]++
		a.attempts += int64(r.Attempts)
		a.terminations[r.Termination]++
		if !slices.Contains(knownTerminations, r.Termination) {
			problem("(%d, %d): unknown termination %q", r.TaskIndex, r.RolloutIndex, r.Termination)
		}
		switch {
		case r.FailureClass == "" && r.HasReward:
			a.scored++
			rewards += r.Reward
			a.classes["-"]++
		case r.FailureClass != "" && !r.HasReward && slices.Contains(knownFailures, r.FailureClass) && r.Error != "":
			a.failed++
			a.classes[string(r.FailureClass)]++
			if _, ok := a.examples[string(r.FailureClass)]; !ok {
				a.examples[string(r.FailureClass)] = fmt.Sprintf("(%d, %d) %s: %s", r.TaskIndex, r.RolloutIndex, r.Termination, record.Clip(r.Error, 300))
			}
		default:
			a.untyped++
			problem("(%d, %d): neither a reward nor a typed failure: has_reward %v, failure_class %q, error %q",
				r.TaskIndex, r.RolloutIndex, r.HasReward, r.FailureClass, r.Error)
		}
	}
	for i, c := range seen {
		switch {
		case c == 0:
			a.missing++
			problem("(%d, %d): no record", i/reps, i%reps)
		case c > 1:
			a.duplicated += c - 1
			problem("(%d, %d): %d records", i/reps, i%reps, c)
		}
	}
	if a.scored > 0 {
		a.meanReward = rewards / float64(a.scored)
	}
	return a
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// injectedCount reads "N <what>" from a server's closing line.
func injectedCount(line, what string) int {
	m := regexp.MustCompile(`(\d+) ` + regexp.QuoteMeta(what)).FindStringSubmatch(line)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// maxRSS is a finished process's peak resident memory.
func maxRSS(ps *os.ProcessState) string {
	if ps == nil {
		return "?"
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return fmt.Sprintf("%d MiB", ru.Maxrss>>10) // kilobytes on Linux
	}
	return "?"
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for sc.Scan() {
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// buildBinary builds cmd/rollout once, without the race detector (the children are the load,
// not the subject of -race).
func buildBinary(t *testing.T) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "rollout")
	cmd := exec.Command(goTool, "build", "-o", bin, "./cmd/rollout")
	cmd.Dir = root
	begin := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("built %s in %v", bin, time.Since(begin).Round(time.Millisecond))
	return bin
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// proc is a server child process: `rollout sim` or `rollout serve`, which prints its URL on
// stdout and, on SIGINT, its counters on stderr.
type proc struct {
	name   string
	cmd    *exec.Cmd
	url    string
	debug  string // its ROLLOUT_DEBUG_ADDR
	stderr *syncBuffer
	done   chan error
}

// syncBuffer collects a process's output while it runs.
type syncBuffer = testnet.Buffer

func freePort(t *testing.T) string {
	t.Helper()
	port, err := testnet.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: args[0], stderr: &syncBuffer{}, done: make(chan error, 1), debug: freePort(t)}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), "ROLLOUT_DEBUG_ADDR="+p.debug)
	p.cmd.Stderr = p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		lines <- strings.TrimSpace(line)
		io.Copy(io.Discard, r)
		p.done <- p.cmd.Wait()
	}()
	select {
	case p.url = <-lines:
	case <-time.After(60 * time.Second):
		t.Fatalf("rollout %s printed no URL in 60s; stderr:\n%s", p.name, p.stderr.String())
	}
	if !strings.HasPrefix(p.url, "http://127.0.0.1:") {
		t.Fatalf("rollout %s printed %q, want a loopback URL; stderr:\n%s", p.name, p.url, p.stderr.String())
	}
	return p
}

// goroutineTotal reads the process's goroutine count from its pprof endpoint.
func (p *proc) goroutineTotal() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.debug+"/debug/pprof/goroutine?debug=1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		return 0, err
	}
	var n int
	if _, err := fmt.Sscanf(line, "goroutine profile: total %d", &n); err != nil {
		return 0, fmt.Errorf("%q: %v", line, err)
	}
	return n, nil
}

// checkGoroutines waits (up to 15 s) for the server to be back to a handful of goroutines.
func (p *proc) checkGoroutines(t *testing.T) {
	t.Helper()
	const most = 40
	deadline := time.Now().Add(15 * time.Second)
	for {
		n, err := p.goroutineTotal()
		if err != nil {
			t.Errorf("rollout %s: goroutines: %v", p.name, err)
			return
		}
		if n <= most {
			t.Logf("rollout %s: %d goroutines after the run", p.name, n)
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("rollout %s: %d goroutines 15s after the run's process ended, want at most %d (requests left hanging?)", p.name, n, most)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stop interrupts the server as Ctrl-C would, checks that it exits 0 within 10 s, and returns
// its closing counters line.
func (p *proc) stop(t *testing.T) string {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-p.done:
		close(p.done)
		if err != nil {
			t.Errorf("rollout %s exited with %v after SIGINT; stderr:\n%s", p.name, err, p.stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Errorf("rollout %s did not stop within 10s of SIGINT", p.name)
		return ""
	}
	var last string
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		if strings.Contains(line, "served") || strings.Contains(line, "chaos:") {
			last = line
		}
	}
	return last
}
