package main

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/redistest"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// ScaleDemoEnv, set to 1, runs TestScaleDemo (make scale-demo).
const ScaleDemoEnv = "ROLLOUT_SCALE_DEMO"

// startLines starts bin with args and returns the first line it writes to stdout and the
// first it writes to stderr (when firstErr), then drains both; the process is killed when the
// test ends.
func startLines(t *testing.T, bin string, firstErr bool, args ...string) (cmd *exec.Cmd, out, errLine string) {
	t.Helper()
	cmd = exec.Command(bin, args...)
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	eb, ob := bufio.NewReader(stderr), bufio.NewReader(stdout)
	if firstErr {
		errLine, _ = eb.ReadString('\n')
	}
	out, err := ob.ReadString('\n')
	if err != nil {
		t.Fatalf("%s %s: no address on stdout: %v", bin, args, err)
	}
	go io.Copy(io.Discard, eb)
	go io.Copy(io.Discard, ob)
	return cmd, strings.TrimSpace(out), strings.TrimSpace(errLine)
}

// roundRobin is what a Kubernetes Service is to the resource server's replicas: each request
// to the next one.
func roundRobin(t *testing.T, backends []string) string {
	var n atomic.Int64
	var proxies []*httputil.ReverseProxy
	for _, b := range backends {
		u, err := url.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		p := httputil.NewSingleHostReverseProxy(u)
		p.ErrorLog = log.New(io.Discard, "", 0)
		proxies = append(proxies, p)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxies[int(n.Add(1))%len(proxies)].ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestScaleDemo is on one machine what the cluster of deploy/kubernetes does: two resource
// server processes sharing their sessions in a real redis-server (behind a round-robin proxy,
// as a Service), the simulator, four shard processes at once, one of them killed with -9 in
// the middle and started again with the same command (as backoffLimitPerIndex would), the
// merge, and the same job run as one process: the merged records and figures must be the
// single process's. make scale-demo runs it.
func TestScaleDemo(t *testing.T) {
	if os.Getenv(ScaleDemoEnv) != "1" {
		t.Skipf("make scale-demo runs it (%s=1)", ScaleDemoEnv)
	}
	start := time.Now()
	bin := buildRollout(t)
	root := t.TempDir()
	redisURL := redistest.Start(t)

	// 80 extraction tasks, two arms, two repeats: 320 rollouts.
	data, err := os.ReadFile("../../data/extraction.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	input := filepath.Join(root, "tasks.jsonl")
	if err := os.WriteFile(input, []byte(strings.Join(strings.SplitAfter(string(data), "\n")[:80], "")), 0o644); err != nil {
		t.Fatal(err)
	}

	var servers, metricsURLs []string
	for range 2 {
		_, u, errLine := startLines(t, bin, true, "serve", "extraction", "--addr", "127.0.0.1:0", "--session-store", redisURL, "--metrics-addr", "127.0.0.1:0")
		m, ok := strings.CutPrefix(errLine, "rollout: metrics on ")
		if !ok {
			t.Fatalf("serve: %q: no metrics address", errLine)
		}
		servers, metricsURLs = append(servers, u), append(metricsURLs, m)
	}
	service := roundRobin(t, servers)
	// The simulator's mistakes (wrong arguments, skipped steps, premature answers) are drawn
	// per conversation, so that a rollout run again (the killed shard's) gets the same answers.
	_, modelURL, _ := startLines(t, bin, false, "sim", "--tasks", input, "--addr", "127.0.0.1:0", "--sim-seed", "7",
		"--sim-latency", "uniform:10ms-30ms", "--sim-wrong-argument", "0.15", "--sim-skip-step", "0.1", "--sim-premature-answer", "0.05")
	job := func(out string, extra ...string) []string {
		return append([]string{"run", "--input", input, "--out", out, "--model-url", modelURL, "--model", "rollout-sim", "--server", service,
			"--arms", "single,multi", "--num-repeats", "2", "--concurrency", "4", "--quiet"}, extra...)
	}
	shard := func(i int) []string {
		return job(filepath.Join(root, "run", fmt.Sprintf("shard-%d", i)), "--shard", fmt.Sprintf("%d/4", i), "--resume=auto", "--metrics-addr", "127.0.0.1:0")
	}

	// Four shards at once; shard 1 killed with -9 once it has 10 records.
	type proc struct {
		cmd    *exec.Cmd
		stderr *strings.Builder
		waited <-chan error
	}
	var procs []proc
	for i := range 4 {
		cmd, stderr, waited := startRollout(t, bin, shard(i)...)
		procs = append(procs, proc{cmd, stderr, waited})
	}
	journal := filepath.Join(root, "run", "shard-1", rundir.JournalFile)
	for rundir.JournalLines(filepath.Dir(journal)) < 10 {
		select {
		case err := <-procs[1].waited:
			t.Fatalf("shard 1 ended (%v) before it could be killed: %s", err, procs[1].stderr)
		case <-time.After(5 * time.Millisecond):
		}
	}
	procs[1].cmd.Process.Signal(syscall.SIGKILL)
	err = <-procs[1].waited
	killedAt := rundir.JournalLines(filepath.Dir(journal))
	if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("shard 1: %v, want killed", err)
	}
	t.Logf("shard 1 killed with -9 after %d of its 80 records", killedAt)
	for i, p := range procs {
		if i == 1 {
			continue
		}
		if err := <-p.waited; err != nil {
			t.Fatalf("shard %d: %v\n%s", i, err, p.stderr)
		}
	}
	// The merge refuses the unfinished shard, naming it.
	shards := filepath.Join(root, "run", "shard-*")
	out, err := exec.Command(bin, "merge", "--out", filepath.Join(root, "merged"), shards).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "shard 1/4 did not finish") {
		t.Fatalf("merge with shard 1 killed: %v\n%s", err, out)
	}
	// The same command again, as the Job's retry of index 1: it resumes.
	_, stderr, waited := startRollout(t, bin, shard(1)...)
	if err := <-waited; err != nil || !strings.Contains(stderr.String(), "rollout: resuming") {
		t.Fatalf("shard 1 again: %v\n%s", err, stderr)
	}
	// Shard 1 has each of its rollouts once: tasks 1, 5, ..., 77, two repeats, two arms.
	seen := map[record.Key]bool{}
	for _, r := range readRecords(t, filepath.Dir(journal)) {
		if seen[r.Key()] || r.TaskIndex%4 != 1 {
			t.Errorf("shard 1: record %v twice, or not of shard 1", r.Key())
		}
		seen[r.Key()] = true
	}
	if len(seen) != 80 || rundir.JournalLines(filepath.Dir(journal)) != 80 {
		t.Errorf("shard 1: %d rollouts, %d journal lines; want 80", len(seen), rundir.JournalLines(filepath.Dir(journal)))
	}

	out, err = exec.Command(bin, "merge", "--out", filepath.Join(root, "merged"), shards).Output()
	if err != nil {
		t.Fatalf("merge: %v", err)
	}
	fmt.Printf("== the merged run (4 shards, shard 1 killed with -9 after %d records and resumed):\n%s\n", killedAt, out)

	single := filepath.Join(root, "single")
	if out, err := exec.Command(bin, job(single)...).CombinedOutput(); err != nil {
		t.Fatalf("single process: %v\n%s", err, out)
	}
	merged := filepath.Join(root, "merged")
	// The HTTP attempts are the run's own too (a connection the proxy saw closed is retried).
	if below := sameResults(t, merged, single, 320, func(r *record.Record) { r.Attempts = 0 }); below == 0 {
		t.Error("every rollout has reward 1: the simulator's mistakes are not in the job")
	}
	// Both resource servers served sessions: the Redis store is what let any of them answer.
	for i, m := range metricsURLs {
		if seeded := serverCounter(t, m, "rollout_server_sessions_seeded_total"); seeded <= 0 {
			t.Errorf("resource server %d seeded no session", i)
		} else {
			t.Logf("resource server %d: %v sessions seeded", i, seeded)
		}
	}
	if !t.Failed() {
		fmt.Printf("== scale demo: the merge equals the single-process run (320 rollouts: every record, summary.json, evaluation.json); %s in all\n",
			time.Since(start).Round(100*time.Millisecond))
	}
}

// TestScaleDemoStraggler measures what over-sharding is for: four processes share one job, one
// of them four times slower than the others (--concurrency 1 against 4: a pod on a crowded
// node). Split statically (--shard I/4) the slow process's quarter sets the job's end; with
// --shard claim/16 the slow process runs fewer shards and the job ends when the work does.
// It prints both wall times and the shards each process ran; the merges of both are checked
// to be the whole job. make scale-demo runs it; it asserts no time.
func TestScaleDemoStraggler(t *testing.T) {
	if os.Getenv(ScaleDemoEnv) != "1" {
		t.Skipf("make scale-demo runs it (%s=1)", ScaleDemoEnv)
	}
	bin := buildRollout(t)
	root := t.TempDir()
	input := headLines(t, extractionData, 60)
	job := func(out string, concurrency int, extra ...string) []string {
		return append([]string{"run", "--input", input, "--out", out, "--model-url", "builtin:sim", "--server", "builtin:extraction",
			"--arms", "single,multi", "--sim-latency", "200ms", "--concurrency", strconv.Itoa(concurrency), "--quiet"}, extra...)
	}
	concurrency := []int{1, 4, 4, 4} // process 0 is the straggler
	// run starts the four processes with args(p) and returns the job's wall time, each
	// process's, and each process's stderr.
	run := func(args func(p int) []string) (time.Duration, []time.Duration, []string) {
		start := time.Now()
		var waits []<-chan error
		var errs []*strings.Builder
		for p := range 4 {
			_, stderr, waited := startRollout(t, bin, args(p)...)
			waits, errs = append(waits, waited), append(errs, stderr)
		}
		logs, took := make([]string, 4), make([]time.Duration, 4)
		var wg sync.WaitGroup
		for p, w := range waits {
			wg.Go(func() {
				if err := <-w; err != nil {
					t.Errorf("process %d: %v\n%s", p, err, errs[p])
				}
				took[p] = time.Since(start)
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		for p := range 4 {
			logs[p] = errs[p].String()
		}
		return time.Since(start), took, logs
	}
	static, staticTook, _ := run(func(p int) []string {
		return job(filepath.Join(root, "static", fmt.Sprintf("shard-%d", p)), concurrency[p], "--shard", fmt.Sprintf("%d/4", p))
	})
	claimed, claimedTook, logs := run(func(p int) []string {
		return job(filepath.Join(root, "claimed"), concurrency[p], "--shard", "claim/16")
	})
	for _, dir := range []string{"static", "claimed"} {
		out, err := exec.Command(bin, "merge", "--out", filepath.Join(root, dir+"-merged"), filepath.Join(root, dir, "shard-*")).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "rollouts         120") {
			t.Fatalf("merge of %s: %v\n%s", dir, err, out)
		}
	}
	fmt.Printf("== a straggler (one of 4 processes at --concurrency 1, the others 4; 120 rollouts, --sim-latency 200ms):\n")
	fmt.Printf("   static split --shard I/4:      %s (the processes: %s)\n", static.Round(10*time.Millisecond), rounded(staticTook))
	fmt.Printf("   over-sharded --shard claim/16: %s (the processes: %s): %.2f of the static split's time\n",
		claimed.Round(10*time.Millisecond), rounded(claimedTook), claimed.Seconds()/static.Seconds())
	for p, l := range logs {
		fmt.Printf("   process %d (--concurrency %d) ran %d shards\n", p, concurrency[p], strings.Count(l, "claimed by"))
	}
}

// rounded is ds to a tenth of a second, as "1.2s, 3.4s".
func rounded(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.Round(100 * time.Millisecond).String()
	}
	return strings.Join(s, ", ")
}
