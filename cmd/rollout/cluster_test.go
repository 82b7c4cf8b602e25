package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rollout-dev/rollout/internal/redistest"
	"github.com/rollout-dev/rollout/internal/testnet"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// A run whose failures are all transient (the endpoint was down: model_unavailable) exits 5,
// not 4, so that a scheduler retries it; the same command with --resume=auto runs those
// rollouts again. A run with a failure of the model's own (model_error) exits 4 and
// --resume=auto keeps that record: only --retry-failed runs it again.
func TestTransientFailuresExitFiveAndResumeAutoRetriesThem(t *testing.T) {
	var mode atomic.Value
	mode.Store("down")
	m := modeModel(t, &mode)
	classes := func(dir string) []string {
		var out []string
		for _, rec := range readRecords(t, dir) {
			out = append(out, string(rec.FailureClass))
		}
		return out
	}
	input := weatherRows(t, 3, "")
	run := func(dir string, extra ...string) result {
		args := append([]string{"run", "--input", input, "--out", dir, "--model-url", m.URL + "/v1", "--model", "m",
			"--server", "builtin:example_single_tool_call", "--retries", "0", "--quiet"}, extra...)
		return runCLI(t, context.Background(), nil, args...)
	}

	dir := t.TempDir()
	r := run(dir, "--resume=auto")
	if r.code != exitTransient || !strings.Contains(r.stderr, "transient") {
		t.Fatalf("model down: exit %d, want %d: %s", r.code, exitTransient, r.stderr)
	}
	if got := classes(dir); !slices.Equal(got, []string{record.FailModelUnavailable, record.FailModelUnavailable, record.FailModelUnavailable}) {
		t.Fatalf("classes %v", got)
	}
	mode.Store("up")
	if r := run(dir, "--resume=auto"); r.code != exitOK {
		t.Fatalf("--resume=auto with the model up: exit %d: %s", r.code, r.stderr)
	}
	if got := classes(dir); !slices.Equal(got, []string{"", "", ""}) {
		t.Errorf("after --resume=auto: classes %v, want the transient failures run again", got)
	}

	dir = t.TempDir()
	mode.Store("bad-w0")
	if r := run(dir, "--resume=auto"); r.code != exitFailures {
		t.Fatalf("a model_error among transient failures: exit %d, want %d: %s", r.code, exitFailures, r.stderr)
	}
	mode.Store("up")
	r = run(dir, "--resume=auto", "--fail-on-error", "1")
	if r.code != exitOK {
		t.Fatalf("--resume=auto: exit %d: %s", r.code, r.stderr)
	}
	if got := classes(dir); !slices.Equal(got, []string{record.FailModelError, "", ""}) {
		t.Errorf("after --resume=auto: classes %v, want the model_error kept and the others run again", got)
	}
}

// modeModel is a fake model that answers as mode says: "down", 503 (warming up) to every
// request; "bad-w0", 400 (a model error) to the rollout of "weather 0?" and 503 to the others;
// "up", an answer.
func modeModel(t *testing.T, mode *atomic.Value) *fakeModel {
	return newFakeModel(t, func(w http.ResponseWriter, req map[string]any, _ int64) {
		switch mode.Load() {
		case "down":
			http.Error(w, `{"error":{"message":"warming up"}}`, http.StatusServiceUnavailable)
			return
		case "bad-w0":
			if strings.Contains(jsonText(req), "weather 0?") {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `{"error": {"message": "bad request", "type": "invalid_request_error"}}`)
				return
			}
			http.Error(w, `{"error":{"message":"warming up"}}`, http.StatusServiceUnavailable)
			return
		}
		writeChat(w, "done")
	})
}

// jsonText is v as JSON text, for a test to look for a string in a request.
func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The preflight tells a model or server that is not up yet (unreachable, 5xx) from a
// configuration that a retry cannot change (no API at the URL): the first exits 5, which the
// Job's pod failure policy retries, and with --wait-ready it is waited for; the second exits 2
// at once, whatever --wait-ready says. A locked --out (another pod of the same index still
// running) exits 5 too. A bad --wait-ready is one line naming it, exit 2.
func TestPreflightWaitsForEndpointsAndExitsTransient(t *testing.T) {
	input := weatherRows(t, 2, "")
	args := func(modelURL, out string, extra ...string) []string {
		return append([]string{"run", "--input", input, "--out", out, "--model-url", modelURL, "--model", "m",
			"--server", "builtin:example_single_tool_call", "--quiet"}, extra...)
	}
	closed := testnet.ClosedPort(t)
	t.Run("unreachable, no wait", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		r := runCLI(t, context.Background(), nil, args(closed+"/v1", out)...)
		if r.code != exitTransient || !strings.HasPrefix(r.stderr, "rollout: --model-url "+closed+"/v1: cannot reach") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("exit %d, want %d and one line naming --model-url: %s", r.code, exitTransient, r.stderr)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("--out was created: %v", err)
		}
	})
	t.Run("not ready, then up", func(t *testing.T) {
		var lists atomic.Int32
		m := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/models") {
				if lists.Add(1) <= 2 {
					http.Error(w, `{"error":{"message":"loading the weights"}}`, http.StatusServiceUnavailable)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"object": "list", "data": [{"id": "m"}]}`)
				return
			}
			writeChat(w, "done")
		}))
		defer m.Close()
		r := runCLI(t, context.Background(), nil, args(m.URL+"/v1", t.TempDir(), "--wait-ready", "10m")...)
		if r.code != exitOK || !strings.Contains(r.stderr, "waiting up to 10m0s (--wait-ready)") || !strings.Contains(r.stderr, "loading the weights") {
			t.Errorf("exit %d: %s", r.code, r.stderr)
		}
		if n := lists.Load(); n != 3 {
			t.Errorf("%d model list requests, want 3", n)
		}
		// Without --wait-ready the 503 exits 5 at once.
		lists.Store(0)
		r = runCLI(t, context.Background(), nil, args(m.URL+"/v1", t.TempDir())...)
		if r.code != exitTransient || !strings.Contains(r.stderr, "503") {
			t.Errorf("without --wait-ready: exit %d: %s", r.code, r.stderr)
		}
	})
	t.Run("not ready within the wait", func(t *testing.T) {
		r := runCLI(t, context.Background(), nil, args(closed+"/v1", t.TempDir(), "--wait-ready", "1s")...)
		if r.code != exitTransient || !strings.Contains(r.stderr, "not ready within --wait-ready 1s") {
			t.Errorf("exit %d: %s", r.code, r.stderr)
		}
	})
	t.Run("a configuration error is not waited for", func(t *testing.T) {
		var gets atomic.Int32
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			gets.Add(1)
			http.NotFound(w, r)
		}))
		defer s.Close()
		r := runCLI(t, context.Background(), nil, args(s.URL+"/v1", t.TempDir(), "--wait-ready", "10m")...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "no OpenAI-compatible API") || gets.Load() != 1 {
			t.Errorf("exit %d after %d requests: %s", r.code, gets.Load(), r.stderr)
		}
	})
	t.Run("an interrupt ends the wait", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan result)
		go func() { done <- runCLI(t, ctx, nil, args(closed+"/v1", t.TempDir(), "--wait-ready", "10m")...) }()
		cancel()
		if r := <-done; r.code != exitInterrupted {
			t.Errorf("exit %d: %s", r.code, r.stderr)
		}
	})
	t.Run("bad --wait-ready", func(t *testing.T) {
		r := runCLI(t, context.Background(), nil, args(closed+"/v1", t.TempDir(), "--wait-ready", "-5s")...)
		if r.code != exitUsage || !strings.HasPrefix(r.stderr, "rollout: --wait-ready -5s:") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("exit %d: %s", r.code, r.stderr)
		}
	})
	t.Run("--out locked", func(t *testing.T) {
		out := t.TempDir()
		unlock, err := rundir.LockDir(out)
		if err != nil {
			t.Fatal(err)
		}
		defer unlock()
		r := runCLI(t, context.Background(), nil, args("builtin:sim", out)...)
		if r.code != exitTransient || !strings.Contains(r.stderr, "--out") {
			t.Errorf("exit %d: %s", r.code, r.stderr)
		}
	})
}

// rollout serve --session-key-file signs the cookies with a key from a file (the mounted
// Secret of the Kubernetes manifests): nothing that can write the session store can read or
// replace it, while without the flag the key lives in the store. Redis with requirepass
// refuses a server without the password. A short or missing key file is one line naming the
// flag, exit 2.
func TestSessionKeyFileKeepsTheKeyOutOfTheStore(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t, "--requirepass", "pw-1")
	authed := strings.Replace(url, "redis://", "redis://:pw-1@", 1)
	if b, err := newBuiltin(ctx, "extraction", url, time.Minute, nil); err == nil {
		b.Close()
		t.Error("a server without the Redis password was let in")
	}
	opts, err := redis.ParseURL(authed)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opts)
	defer rc.Close()
	secrets := func() []string {
		keys, err := rc.Keys(ctx, "rollout:secret:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	keyFile := filepath.Join(t.TempDir(), "session-key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := parseServe([]string{"extraction", "--session-store", authed, "--session-key-file", keyFile}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newBuiltin(ctx, a.name, a.storeURL, a.ttl, a.key)
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if got := secrets(); len(got) != 0 {
		t.Errorf("with --session-key-file the store holds %v", got)
	}
	srv, err = newBuiltin(ctx, a.name, a.storeURL, a.ttl, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if got := secrets(); len(got) != 1 {
		t.Errorf("without --session-key-file the store holds %v, want the key", got)
	}

	short := filepath.Join(t.TempDir(), "short")
	os.WriteFile(short, []byte("0123456789\n"), 0o600)
	for _, file := range []string{short, filepath.Join(t.TempDir(), "missing")} {
		r := runCLI(t, ctx, nil, "serve", "extraction", "--session-key-file", file)
		if r.code != exitUsage || !strings.HasPrefix(r.stderr, "rollout: serve: --session-key-file") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%s: exit %d: %s", file, r.code, r.stderr)
		}
	}
}

// A --out the run's user may not write (a ReadWriteMany volume's root-owned 0755 directory, the
// shards running as uid 65532: fsGroup not applied) is one line that says what to set, exit
// 2, nothing created. As root the test runs rollout as uid 65532, as the pods do.
func TestOutPermissionDeniedSaysWhatToSet(t *testing.T) {
	shared, err := os.MkdirTemp("", "rollout-perm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	// The binary and the input where any user may read them; the volume's directory
	// root-owned (or this user's) and 0555 to others.
	bin := filepath.Join(shared, "rollout")
	b, err := os.ReadFile(buildRollout(t))
	if err != nil {
		t.Fatal(err)
	}
	volume := filepath.Join(shared, "results")
	for _, err := range []error{os.WriteFile(bin, b, 0o755), os.WriteFile(filepath.Join(shared, "tasks.jsonl"), []byte(readFile(t, weatherRows(t, 2, ""))), 0o644),
		os.Mkdir(volume, 0o755), os.Chmod(shared, 0o755)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "run", "--input", filepath.Join(shared, "tasks.jsonl"), "--out", filepath.Join(volume, "run", "shard-0"),
		"--model-url", "builtin:sim", "--server", "builtin:example_single_tool_call", "--quiet")
	if os.Getuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	} else if err := os.Chmod(volume, 0o555); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.Run()
	code := cmd.ProcessState.ExitCode()
	msg := stderr.String()
	if code != exitUsage || strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "rollout: --out "+filepath.Join(volume, "run", "shard-0")) ||
		!strings.Contains(msg, "permission denied") || !strings.Contains(msg, "fsGroup") || !strings.Contains(msg, "runAsUser") {
		t.Errorf("exit %d: %s", code, msg)
	}
	if entries, _ := os.ReadDir(volume); len(entries) != 0 {
		t.Errorf("the run left %v in the volume", entries)
	}
}

// A shard's metrics say what it plans and what is left, while it runs: shard 1/2 of 5 tasks
// with 2 arms plans 4 rollouts, none recorded while the model holds every call.
func TestShardMetricsPlannedRemaining(t *testing.T) {
	release := make(chan struct{})
	m := newFakeModel(t, func(w http.ResponseWriter, _ map[string]any, _ int64) {
		<-release
		writeChat(w, "done")
	})
	port, err := testnet.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	done := make(chan result)
	go func() {
		done <- runCLI(t, context.Background(), nil, "run", "--input", weatherRows(t, 5, ""), "--out", t.TempDir(), "--model-url", m.URL+"/v1",
			"--model", "m", "--server", "builtin:example_single_tool_call", "--arms", "single,multi", "--shard", "1/2", "--quiet", "--metrics-addr", addr)
	}()
	metric := func(text, name string) string {
		for _, line := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				return v
			}
		}
		return ""
	}
	var text string
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			text = string(b)
			if metric(text, "rollout_rollouts_in_flight") == "4" {
				break
			}
		}
		select {
		case r := <-done:
			t.Fatalf("the run ended first: exit %d: %s", r.code, r.stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if p, rem := metric(text, "rollout_rollouts_planned"), metric(text, "rollout_rollouts_remaining"); p != "4" || rem != "4" {
		t.Errorf("planned %q remaining %q, want 4 and 4", p, rem)
	}
	close(release)
	if r := <-done; r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
}

// With --session-key-file, a session's state rewritten in Redis between the tool calls and the
// verify (altered in place, or another session's value copied over it) is not scored: the
// verify answers 409 session_tampered, and the rollout's record is a resource_server failure,
// no reward.
func TestTamperedSessionStateIsNotScored(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	keyFile := filepath.Join(t.TempDir(), "session-key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("cd", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := parseServe([]string{"extraction", "--session-store", url, "--session-key-file", keyFile}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newBuiltin(ctx, a.name, a.storeURL, a.ttl, a.key)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opts)
	defer rc.Close()
	// In front of the server: before each verify, the session's value in Redis is rewritten,
	// by turns appended to in place and replaced with the previous session's value.
	var mu sync.Mutex
	var last []byte
	verifies := 0
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/verify" {
			mu.Lock()
			for _, c := range r.Cookies() {
				sid, _, ok := strings.Cut(c.Value, ".")
				if !ok || !strings.HasSuffix(c.Name, "___extraction") {
					continue
				}
				key := "rollout:session:extraction:" + sid
				v, err := rc.Get(r.Context(), key).Bytes()
				if err != nil {
					t.Errorf("verify %d: the session's state: %v", verifies, err)
					continue
				}
				forged := append(append([]byte{}, v...), ' ')
				if verifies%2 == 1 {
					forged = last
				}
				if err := rc.Set(r.Context(), key, forged, time.Minute).Err(); err != nil {
					t.Error(err)
				}
				last = v
				verifies++
			}
			mu.Unlock()
		}
		srv.ServeHTTP(w, r)
	}))
	defer front.Close()

	dir := t.TempDir()
	r := runCLI(t, ctx, nil, "run", "--input", headLines(t, extractionData, 4), "--out", dir, "--model-url", "builtin:sim",
		"--server", front.URL, "--quiet", "--concurrency", "1")
	if r.code != exitTransient || !strings.Contains(r.stderr, "session_tampered") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if verifies != 4 {
		t.Errorf("%d verifies rewritten, want 4", verifies)
	}
	recs := readRecords(t, dir)
	if len(recs) != 4 {
		t.Fatalf("%d records", len(recs))
	}
	for _, rec := range recs {
		if rec.HasReward || rec.FailureClass != record.FailResourceServer || !strings.Contains(rec.Error, "session_tampered") {
			t.Errorf("task %d: reward %v (%v), %s %q", rec.TaskIndex, rec.Reward, rec.HasReward, rec.FailureClass, rec.Error)
		}
	}
}

// With --session-key-file, a session's earlier state written back into Redis (a replay of a
// value the server sealed itself: the state seed_session left, before the tool calls made
// progress) is not scored: the verify answers 409 session_tampered, the record is a
// resource_server failure. Runs whose answers get lost are unaffected: a tool call served and
// then answered 502 (its cookie never reaching the runner), a seed_session and a verify served
// and then answered 502 (and retried), concurrent rollouts; and a resume reruns the refused
// rollouts and scores them.
func TestReplayedSessionStateIsNotScored(t *testing.T) {
	ctx := context.Background()
	url := redistest.Start(t)
	keyFile := filepath.Join(t.TempDir(), "session-key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("ef", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := parseServe([]string{"extraction", "--session-store", url, "--session-key-file", keyFile}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newBuiltin(ctx, a.name, a.storeURL, a.ttl, a.key)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opts)
	defer rc.Close()

	// In front of the server: with replay on, the session's value in Redis at its first tool
	// call (what seed_session wrote) is written back before its verify. With lose on, the first
	// seed_session, the first tool call and the first verify of each session are served and
	// then answered 502, without the server's cookie.
	var replay, lose atomic.Bool
	var mu sync.Mutex
	seeded := map[string][]byte{} // session key -> its value at the first tool call
	lost := map[string]bool{}     // what has been lost once: "seed", key+path
	replayed := 0
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := ""
		for _, c := range r.Cookies() {
			if sid, _, ok := strings.Cut(c.Value, "."); ok && strings.HasSuffix(c.Name, "___extraction") {
				key = "rollout:session:extraction:" + sid
			}
		}
		mu.Lock()
		if key != "" && r.URL.Path != "/seed_session" && r.URL.Path != "/verify" && seeded[key] == nil {
			v, err := rc.Get(r.Context(), key).Bytes()
			if err != nil {
				t.Errorf("%s: the seeded state: %v", r.URL.Path, err)
			}
			seeded[key] = v
		}
		if replay.Load() && r.URL.Path == "/verify" && seeded[key] != nil {
			if err := rc.Set(r.Context(), key, seeded[key], time.Minute).Err(); err != nil {
				t.Error(err)
			}
			replayed++
		}
		once := key + r.URL.Path
		if r.URL.Path == "/seed_session" {
			once = "seed"
		}
		drop := lose.Load() && !lost[once] && r.URL.Path != "/"
		lost[once] = lost[once] || drop
		mu.Unlock()
		if !drop {
			srv.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, r)
		http.Error(w, "lost on the way", http.StatusBadGateway)
	}))
	defer front.Close()

	run := func(dir string, extra ...string) result {
		args := append([]string{"run", "--input", headLines(t, extractionData, 4), "--out", dir, "--model-url", "builtin:sim",
			"--server", front.URL, "--quiet"}, extra...)
		return runCLI(t, ctx, nil, args...)
	}
	scored := func(dir string) {
		t.Helper()
		recs := readRecords(t, dir)
		if len(recs) != 4 {
			t.Fatalf("%d records", len(recs))
		}
		for _, rec := range recs {
			if !rec.HasReward || rec.FailureClass != "" {
				t.Errorf("task %d: reward %v (%v), %s %q", rec.TaskIndex, rec.Reward, rec.HasReward, rec.FailureClass, rec.Error)
			}
		}
	}

	replay.Store(true)
	dir := t.TempDir()
	r := run(dir, "--concurrency", "1")
	if r.code != exitTransient || !strings.Contains(r.stderr, "session_tampered") {
		t.Fatalf("replayed: exit %d: %s", r.code, r.stderr)
	}
	if replayed != 4 {
		t.Errorf("%d verifies replayed, want 4", replayed)
	}
	for _, rec := range readRecords(t, dir) {
		if rec.HasReward || rec.FailureClass != record.FailResourceServer || !strings.Contains(rec.Error, "session_tampered") {
			t.Errorf("replayed: task %d: reward %v (%v), %s %q", rec.TaskIndex, rec.Reward, rec.HasReward, rec.FailureClass, rec.Error)
		}
	}
	replay.Store(false)
	if r := run(dir, "--resume=auto", "--concurrency", "1"); r.code != exitOK {
		t.Fatalf("resume: exit %d: %s", r.code, r.stderr)
	}
	scored(dir)

	lose.Store(true)
	dir = t.TempDir()
	if r := run(dir, "--concurrency", "4"); r.code != exitOK {
		t.Fatalf("answers lost: exit %d: %s", r.code, r.stderr)
	}
	scored(dir)
	mu.Lock()
	n := 0
	for _, l := range lost {
		if l {
			n++
		}
	}
	mu.Unlock()
	if n < 9 { // the seed, and each of the 4 sessions' first tool call and verify
		t.Errorf("%d answers lost, want 9", n)
	}
}
