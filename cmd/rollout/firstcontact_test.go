package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/testnet"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// runProcess runs the rollout binary to its end, with env added to the test's environment, and
// returns its exit code and output.
func runProcess(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(buildRollout(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return result{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func testdataFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "servers", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// vllmServer answers like vLLM serving Qwen/Qwen3-8B: its model list, and its 404 body to a
// chat request for any other model.
func vllmServer(t *testing.T) string {
	models, notFound := testdataFile(t, "vllm_models.json"), testdataFile(t, "vllm_404_unknown_model.json")
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/models":
			w.Write(models)
		case "/v1/chat/completions":
			w.WriteHeader(http.StatusNotFound)
			w.Write(notFound)
		default:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"detail":"Not Found"}`))
		}
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// A web server that is not an API: nginx's welcome page on every path.
func htmlServer(t *testing.T) string {
	page := testdataFile(t, "nginx_welcome.html")
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write(page)
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// A broken setup is refused before anything is written: exit 2, one line naming the flag, the
// URL and the cause, and no output directory.
func TestPreflight(t *testing.T) {
	rows := weatherRows(t, 3, "")
	closed := testnet.ClosedPort(t)
	vllm := vllmServer(t)
	html := htmlServer(t)
	server := "builtin:example_single_tool_call"
	cases := []struct {
		name      string
		args      []string
		firstLine string
	}{
		{"closed model port", []string{"--model-url", closed + "/v1", "--model", "m", "--server", server},
			"rollout: --model-url " + closed + "/v1: cannot reach the model endpoint: dial tcp " + strings.TrimPrefix(closed, "http://") + ": connect: connection refused"},
		{"vllm, unknown model", []string{"--model-url", vllm + "/v1", "--model", "Qwen3-8B", "--server", server},
			"rollout: --model Qwen3-8B: " + vllm + "/v1 does not serve it; it serves Qwen/Qwen3-8B (did you mean Qwen/Qwen3-8B?)"},
		{"vllm, path without /v1", []string{"--model-url", vllm, "--model", "Qwen/Qwen3-8B", "--server", server},
			"rollout: --model-url " + vllm + ": GET " + vllm + "/models answered 404 Not Found: Not Found: no OpenAI-compatible API at this URL (its base usually ends in /v1)"},
		{"html page", []string{"--model-url", html + "/v1", "--model", "m", "--server", server},
			"rollout: --model-url " + html + "/v1: GET " + html + `/v1/models answered an HTML page "Welcome to nginx!", not an OpenAI-compatible model list: is this the API's base URL (it usually ends in /v1)?`},
		{"closed resource server", []string{"--model-url", vllm + "/v1", "--model", "Qwen/Qwen3-8B", "--server", "weather=" + closed},
			"rollout: --server weather=" + closed + ": cannot reach the resource server: dial tcp " + strings.TrimPrefix(closed, "http://") + ": connect: connection refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			r := runProcess(t, nil, append([]string{"run", "--input", rows, "--out", out}, tc.args...)...)
			want := exitUsage // a configuration a retry cannot change
			if strings.Contains(tc.firstLine, "cannot reach") {
				want = exitTransient // not up (yet)
			}
			if r.code != want {
				t.Errorf("exit %d, want %d", r.code, want)
			}
			if got := firstLine(r.stderr); got != tc.firstLine {
				t.Errorf("first line of stderr:\n got %s\nwant %s", got, tc.firstLine)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("--out was created (%v)", err)
			}
		})
	}
	// An endpoint that echoes the key in its 401 cannot make the preflight's error show it.
	t.Run("401 echoing the key", func(t *testing.T) {
		key := "sk-preflight-" + strings.Repeat("k", 24)
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error": {"message": "Incorrect API key provided: %s", "type": "invalid_request_error"}}`, r.Header.Get("Authorization"))
		}))
		defer s.Close()
		r := runCLI(t, context.Background(), map[string]string{"OPENAI_API_KEY": key}, "run", "--input", rows, "--out", t.TempDir(),
			"--model-url", s.URL+"/v1", "--model", "m", "--server", server)
		want := "rollout: --model-url " + s.URL + "/v1: GET " + s.URL + "/v1/models answered 401 Unauthorized: Incorrect API key provided: Bearer [REDACTED]: the endpoint wants an API key (set OPENAI_API_KEY)"
		if r.code != exitUsage || firstLine(r.stderr) != want {
			t.Errorf("exit %d, stderr:\n got %s\nwant %s", r.code, r.stderr, want)
		}
	})
	// llama-server with one model answers any model name: its list does not have to name it.
	t.Run("llama-server with one model", func(t *testing.T) {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/models" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write(testdataFile(t, "llamacpp_models.json"))
		}))
		defer s.Close()
		// The preflight passes; the run then fails at its first model call (exit 4, not 2).
		r := runCLI(t, context.Background(), nil, "run", "--input", rows, "--out", t.TempDir(), "--model-url", s.URL+"/v1",
			"--model", "noise", "--server", server, "--retries", "0", "--quiet")
		if r.code != exitFailures || !strings.HasPrefix(r.stderr, "rollout: first ") {
			t.Errorf("exit %d: %s", r.code, r.stderr)
		}
	})
	// A model URL's password and query reach GET /models (the query apart from the path) and
	// are not shown.
	t.Run("url with a password and a query", func(t *testing.T) {
		var seen string
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			user, pass, _ := r.BasicAuth()
			seen = r.URL.Path + " " + r.URL.Query().Get("api-key") + " " + user + ":" + pass
			w.Header().Set("Content-Type", "application/json")
			w.Write(testdataFile(t, "vllm_models.json"))
		}))
		defer s.Close()
		host := strings.TrimPrefix(s.URL, "http://")
		r := runCLI(t, context.Background(), nil, "run", "--input", rows, "--out", t.TempDir(), "--model-url", "http://u:pw-secret-99999999@"+host+"/v1?api-key=qk-secret-88888888",
			"--model", "Qwen3-8B", "--server", server)
		want := "rollout: --model Qwen3-8B: http://REDACTED@" + host + "/v1 does not serve it; it serves Qwen/Qwen3-8B (did you mean Qwen/Qwen3-8B?)\n"
		if r.code != exitUsage || r.stderr != want {
			t.Errorf("exit %d, stderr:\n got %s\nwant %s", r.code, r.stderr, want)
		}
		if seen != "/v1/models qk-secret-88888888 u:pw-secret-99999999" {
			t.Errorf("the endpoint saw %q", seen)
		}
	})
	// --no-preflight skips it: the run starts and its rollouts fail (below).
	r := runCLI(t, context.Background(), nil, "run", "--input", rows, "--out", t.TempDir(), "--model-url", html+"/v1", "--model", "m",
		"--server", server, "--no-preflight", "--retries", "0", "--quiet")
	if r.code != exitFailures {
		t.Errorf("--no-preflight: exit %d, want %d: %s", r.code, exitFailures, r.stderr)
	}
}

// A dead endpoint with the preflight skipped: the first failure is on stderr at once, the
// first 20 rollouts all fail alike, the run stops early, keeps what ran, says how to resume and
// exits 4; the resume, once the endpoint is up, finishes the run and exits 0.
func TestEarlyStopThenResume(t *testing.T) {
	rows := weatherRows(t, 60, "")
	closed := testnet.ClosedPort(t)
	out := t.TempDir()
	r := runProcess(t, nil, "run", "--input", rows, "--out", out, "--model-url", closed+"/v1", "--model", "m",
		"--server", "builtin:example_single_tool_call", "--no-preflight", "--retries", "0", "--concurrency", "1", "--quiet")
	if r.code != exitTransient { // model_unavailable: transient
		t.Fatalf("exit %d, want %d: %s", r.code, exitTransient, r.stderr)
	}
	wantFirst := `rollout: first model_unavailable failure (task w0, rollout 0, arm multi): model call in round 0: Post "` + closed +
		`/v1/chat/completions": dial tcp ` + strings.TrimPrefix(closed, "http://") + ": connect: connection refused"
	if got := firstLine(r.stderr); got != wantFirst {
		t.Errorf("first line of stderr:\n got %s\nwant %s", got, wantFirst)
	}
	if n := strings.Count(r.stderr, "rollout: first "); n != 1 {
		t.Errorf("%d first-failure lines, want 1 (once per class):\n%s", n, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "rollout: stopped early: the first 20 rollouts all failed with model_unavailable (model call in round 0: Post ") ||
		!strings.HasSuffix(last, "Fix the cause, then finish the run with: rollout run --resume --retry-failed --out "+out+
			" (with the flags that fix it, such as another --model: every rollout so far failed, so all run again under them)") {
		t.Errorf("last line of stderr: %s", last)
	}
	recs := readRecords(t, out)
	// When the 20th is written, the 21st may wait in the runner's results buffer (one slot at
	// --concurrency 1) and the 22nd be running: both are kept, and no more start.
	if len(recs) < 20 || len(recs) > 22 {
		t.Fatalf("%d records, want 20 (up to 22)", len(recs))
	}
	if !strings.Contains(r.stdout, "  model_unavailable  ") || !strings.Contains(r.stdout, "× model call in round 0: Post ") {
		t.Errorf("the summary does not give the class's most common message:\n%s", r.stdout)
	}

	// The endpoint is up: the resume runs the failed rollouts again and the rest.
	m := newFakeModel(t, weatherModel)
	r = runProcess(t, nil, "run", "--input", rows, "--out", out, "--model-url", m.URL+"/v1", "--model", "m",
		"--server", "builtin:example_single_tool_call", "--resume", "--retry-failed", "--force", "--quiet")
	if r.code != exitOK {
		t.Fatalf("resume: exit %d: %s", r.code, r.stderr)
	}
	for _, rec := range checkExactlyOnce(t, out, 60, 1) {
		if rec.FailureClass != "" || rec.Reward != 1 {
			t.Errorf("task %d: class %q reward %v", rec.TaskIndex, rec.FailureClass, rec.Reward)
		}
	}
}

// vLLM's 404 for an unknown model, with the preflight skipped: a model_error (not an
// infrastructure failure, so no early stop), its message on stderr at once, exit 4.
func TestVLLMUnknownModelWithoutPreflight(t *testing.T) {
	vllm := vllmServer(t)
	r := runProcess(t, nil, "run", "--input", weatherRows(t, 3, ""), "--out", t.TempDir(), "--model-url", vllm+"/v1", "--model", "Qwen3-8B",
		"--server", "builtin:example_single_tool_call", "--no-preflight", "--quiet", "--concurrency", "1")
	if r.code != exitFailures {
		t.Fatalf("exit %d, want %d: %s", r.code, exitFailures, r.stderr)
	}
	first := firstLine(r.stderr)
	if !strings.HasPrefix(first, "rollout: first model_error failure (task w0, rollout 0, arm multi): ") || !strings.Contains(first, "The model `Qwen3-8B` does not exist.") {
		t.Errorf("first line of stderr: %s", first)
	}
}

// --fail-on-error: a rate below 1 or a count; every rollout failed always fails the run.
func TestFailOnError(t *testing.T) {
	// Odd-numbered rows get an HTTP 400 (a model_error, not retried): 5 of 10 fail.
	m := newFakeModel(t, func(w http.ResponseWriter, req map[string]any, n int64) {
		msgs := req["messages"].([]any)
		var i int
		fmt.Sscanf(fmt.Sprint(msgs[0].(map[string]any)["content"]), "weather %d?", &i)
		if i%2 == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error": {"message": "bad request", "type": "invalid_request_error"}}`))
			return
		}
		weatherModel(w, req, n)
	})
	rows := weatherRows(t, 10, "")
	for _, tc := range []struct {
		limit string
		code  int
	}{
		{"", exitFailures}, // the default, 0.05
		{"0.5", exitOK},    // 50% allowed
		{"0.4", exitFailures},
		{"5", exitOK}, // five failures allowed
		{"4", exitFailures},
		{"0", exitFailures},
	} {
		args := []string{"run", "--input", rows, "--out", t.TempDir(), "--model-url", m.URL + "/v1", "--model", "m",
			"--server", "builtin:example_single_tool_call", "--quiet"}
		if tc.limit != "" {
			args = append(args, "--fail-on-error", tc.limit)
		}
		r := runCLI(t, context.Background(), nil, args...)
		if r.code != tc.code {
			t.Errorf("--fail-on-error %q: exit %d, want %d: %s", tc.limit, r.code, tc.code, r.stderr)
		}
		if tc.code == exitFailures && !strings.Contains(r.stderr, "rollout: 5 of 10 rollouts failed (model_error 5), past --fail-on-error") {
			t.Errorf("--fail-on-error %q: stderr %s", tc.limit, r.stderr)
		}
	}
	for _, bad := range []string{"-1", "1.5", "x"} {
		r := runCLI(t, context.Background(), nil, "run", "--fail-on-error", bad)
		if r.code != exitUsage || !strings.Contains(r.stderr, "want a rate below 1") {
			t.Errorf("--fail-on-error %s: exit %d: %s", bad, r.code, r.stderr)
		}
	}
}

func TestFailureLimit(t *testing.T) {
	for _, tc := range []struct {
		limit            float64
		failed, rollouts int
		want             bool
	}{
		{0.05, 0, 100, false},
		{0.05, 5, 100, false},
		{0.05, 6, 100, true},
		{0.05, 3, 3, true}, // all failed
		{0.5, 1, 1, true},  // all failed
		{10, 10, 100, false},
		{10, 11, 100, true},
		{100, 5, 5, true}, // all failed, whatever the count
		{0, 1, 100, true},
		{0, 0, 0, false},
	} {
		if got := (failureLimit{tc.limit}).exceeded(tc.failed, tc.rollouts); got != tc.want {
			t.Errorf("limit %v: %d of %d failed: exceeded %v, want %v", tc.limit, tc.failed, tc.rollouts, got, tc.want)
		}
	}
}

func TestClosest(t *testing.T) {
	for _, tc := range []struct {
		word       string
		candidates []string
		want       string
	}{
		{"Qwen3-8B", []string{"Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B"}, "Qwen/Qwen3-8B"},
		{"concurency", []string{"concurrency", "config", "limit"}, "concurrency"},
		{"modle", []string{"model", "model-url", "out"}, "model"},
		{"zzz", []string{"model", "out"}, ""},
		{"extraction", []string{"example_multi_step", "extraction", "workflow"}, "extraction"},
	} {
		if got := strings.Join(closest(tc.word, tc.candidates), ","); got != tc.want {
			t.Errorf("closest(%q) = %q, want %q", tc.word, got, tc.want)
		}
	}
}

// The early-stop watch counts only the first N records, and only one infrastructure class.
func TestFailureWatch(t *testing.T) {
	rec := func(class string) *record.Result {
		return &record.Result{Record: record.Record{TaskID: "t", FailureClass: record.FailureClass(class), Error: class + " error"}}
	}
	for _, tc := range []struct {
		name    string
		classes []string
		stopped bool
	}{
		{"all alike", []string{"model_unavailable", "model_unavailable", "model_unavailable"}, true},
		{"two classes", []string{"model_unavailable", "resource_server", "model_unavailable"}, false},
		{"one success", []string{"model_unavailable", "", "model_unavailable"}, false},
		{"not infrastructure", []string{"bad_task", "bad_task", "bad_task"}, false},
		{"cancelled", []string{"cancelled", "cancelled", "cancelled"}, false},
		{"fewer than N", []string{"timeout", "timeout"}, false},
		{"after the first N", []string{"", "", "", "timeout", "timeout", "timeout"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf strings.Builder
			stops := 0
			w := newFailureWatch(&buf, 3, func() { stops++ })
			for _, c := range tc.classes {
				w.Write(rec(c))
			}
			if w.stopped != tc.stopped || stops != map[bool]int{true: 1}[tc.stopped] {
				t.Errorf("stopped %v after %d stops, want %v", w.stopped, stops, tc.stopped)
			}
			seen := map[string]bool{}
			sc := bufio.NewScanner(strings.NewReader(buf.String()))
			for sc.Scan() {
				seen[sc.Text()] = true
			}
			for _, c := range tc.classes {
				if c != "" && !seen[fmt.Sprintf("rollout: first %s failure (task t, rollout 0, arm ): %s error", c, c)] {
					t.Errorf("no first-failure line for %s:\n%s", c, buf.String())
				}
			}
			if len(seen) != len(distinctFailures(tc.classes)) {
				t.Errorf("%d lines for %d classes:\n%s", len(seen), len(distinctFailures(tc.classes)), buf.String())
			}
		})
	}
}

func distinctFailures(classes []string) map[string]bool {
	m := map[string]bool{}
	for _, c := range classes {
		if c != "" {
			m[c] = true
		}
	}
	return m
}

// Inputs and flags are checked before anything starts: exit 2, one clear first line, and no
// output directory left behind.
func TestStartChecks(t *testing.T) {
	rows := weatherRows(t, 2, "")
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	os.WriteFile(empty, []byte("\n\n"), 0o644)
	sim := []string{"--model-url", "builtin:sim", "--server", "builtin:extraction"}
	cases := []struct {
		name      string
		args      []string
		firstLine string
	}{
		{"empty input", append([]string{"--input", empty}, sim...), "rollout: --input " + empty + ": no tasks"},
		{"stdin with the simulator", append([]string{"--input", "/dev/stdin"}, sim...),
			"rollout: --input /dev/stdin: the simulator (--model-url builtin:sim) reads the tasks' plans before the run reads them, so --input must be a regular file, not a pipe or a device"},
		{"missing input with the simulator", append([]string{"--input", "/nonexistent.jsonl"}, sim...), "rollout: --input /nonexistent.jsonl: no such file or directory"},
		{"no --input", sim, "rollout: run: --input FILE is required"},
		{"model url without a scheme", []string{"--input", rows, "--model-url", "localhost:8000/v1", "--model", "m", "--server", "builtin:extraction"},
			"rollout: --model-url localhost:8000/v1: want an http:// or https:// URL such as http://localhost:8000/v1, builtin:sim or replay:GLOB (did you mean http://localhost:8000/v1?)"},
		{"builtin:sim in a pool", []string{"--input", rows, "--model-url", "builtin:sim", "--model-url", "http://127.0.0.1:1/v1", "--server", "builtin:extraction"},
			`rollout: --model-url builtin:sim,http://127.0.0.1:1/v1: builtin:sim cannot be one endpoint of several; for several simulated endpoints give --model-url builtin:sim --sim-replicas N`},
		{"server name without builtin:", []string{"--input", rows, "--model-url", "builtin:sim", "--server", "extraction"},
			"rollout: --server extraction: want an http:// or https:// URL; did you mean builtin:extraction (rollout's built-in extraction server)?"},
		{"concurrency 0", append([]string{"--input", rows, "--concurrency", "0"}, sim...), "rollout: run: --concurrency must be at least 1, got 0"},
		{"unknown flag", []string{"--concurency", "3"}, "rollout: run: unknown flag --concurency (did you mean --concurrency?); rollout run --help lists the flags"},
		{"flag without its value", []string{"--input"}, "rollout: run: flag needs an argument: --input; rollout run --help lists the flags"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			r := runProcess(t, nil, append([]string{"run", "--out", out}, tc.args...)...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d", r.code, exitUsage)
			}
			if r.stderr != tc.firstLine+"\n" {
				t.Errorf("stderr:\n got %s\nwant %s (one line)", r.stderr, tc.firstLine)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("--out was created (%v)", err)
			}
		})
	}
	// An empty stdin is known to be empty only once read: the same error, and no --out left.
	stdinOut := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(buildRollout(t), "run", "--input", "-", "--out", stdinOut, "--model-url", "http://127.0.0.1:1/v1", "--model", "m",
		"--server", "builtin:example_single_tool_call", "--no-preflight")
	cmd.Stdin = strings.NewReader("\n")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != exitUsage || stderr.String() != "rollout: --input -: no tasks\n" {
		t.Errorf("empty stdin: exit %d: %q", code, stderr.String())
	}
	if _, err := os.Stat(stdinOut); !os.IsNotExist(err) {
		t.Errorf("empty stdin: --out was created (%v)", err)
	}
	r := runProcess(t, nil, "rnu")
	if r.code != exitUsage || r.stderr != "rollout: unknown command \"rnu\" (did you mean run?); rollout help lists the commands\n" {
		t.Errorf("unknown command: exit %d: %q", r.code, r.stderr)
	}
}

// ROLLOUT_<FLAG> sets a flag; the command line overrides it; a bad value names the variable.
func TestEnvironmentFlags(t *testing.T) {
	input := headLines(t, extractionData, 3)
	args := []string{"run", "--input", input, "--model-url", "builtin:sim", "--server", "builtin:extraction", "--quiet"}
	dir := t.TempDir()
	r := runCLI(t, context.Background(), map[string]string{"ROLLOUT_NUM_REPEATS": "2", "ROLLOUT_OUT": dir}, args...)
	if r.code != 0 || len(readRecords(t, dir)) != 6 {
		t.Fatalf("ROLLOUT_NUM_REPEATS=2: exit %d: %s", r.code, r.stderr)
	}
	dir = t.TempDir()
	r = runCLI(t, context.Background(), map[string]string{"ROLLOUT_NUM_REPEATS": "2"}, append(args, "--out", dir, "--num-repeats", "3")...)
	if r.code != 0 || len(readRecords(t, dir)) != 9 {
		t.Fatalf("--num-repeats 3 over ROLLOUT_NUM_REPEATS=2: exit %d: %s", r.code, r.stderr)
	}
	r = runCLI(t, context.Background(), map[string]string{"ROLLOUT_CONCURRENCY": "many"}, args...)
	if r.code != exitUsage || !strings.HasPrefix(r.stderr, `rollout: $ROLLOUT_CONCURRENCY: want a whole number, auto or auto:MAX, got "many"`) {
		t.Errorf("ROLLOUT_CONCURRENCY=many: exit %d: %s", r.code, r.stderr)
	}
}

// rollout run --help: on stdout, every flag in it, in groups, on two screens; the other
// commands' help on stdout too.
func TestHelp(t *testing.T) {
	r := runProcess(t, nil, "run", "--help")
	if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "Usage: rollout run --input FILE") {
		t.Fatalf("exit %d, stderr %q, stdout %.80q", r.code, r.stderr, r.stdout)
	}
	if n := strings.Count(r.stdout, "\n"); n > 100 {
		t.Errorf("rollout run --help is %d lines, want at most 100 (two screens)", n)
	}
	for _, line := range strings.Split(r.stdout, "\n") {
		if len([]rune(line)) > 100 {
			t.Errorf("a line of %d columns, over 100: %s", len([]rune(line)), line)
		}
	}
	for _, section := range []string{"\nInput and output:\n", "\nModel:\n", "\nResource servers:\n", "\nRun control:\n", "\nSimulator ", "\nExamples:\n", "\nEnvironment:\n", "\nExit codes:\n",
		"  4    more rollouts failed than --fail-on-error allows", "ROLLOUT_<FLAG>"} {
		if !strings.Contains(r.stdout, section) {
			t.Errorf("no %q in the help", section)
		}
	}
	// Every request option is named in the short help, and --help-all describes every flag.
	for _, name := range requestFlagNames {
		if !strings.Contains(r.stdout, "--"+name+",") && !strings.Contains(r.stdout, "--"+name+"\n") {
			t.Errorf("run --help does not name --%s", name)
		}
	}
	all := runProcess(t, nil, "run", "--help-all")
	if all.code != 0 || all.stderr != "" || !strings.HasPrefix(all.stdout, "Usage: rollout run --input FILE") {
		t.Fatalf("run --help-all: exit %d, stderr %q, stdout %.80q", all.code, all.stderr, all.stdout)
	}
	var rf runFlags
	fs, _, _ := runFlagSet(&rf, env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }})
	fs.VisitAll(func(f *flag.Flag) {
		_, usage := flag.UnquoteUsage(f)
		first := strings.Fields(usage)
		if !strings.Contains(all.stdout, "\n  --"+f.Name+" ") && !strings.Contains(all.stdout, "\n  --"+f.Name+"\n") || len(first) > 0 && !strings.Contains(all.stdout, first[0]) {
			t.Errorf("run --help-all does not describe --%s", f.Name)
		}
	})
	for _, cmd := range []string{"serve", "sim", "gen", "validate", "compare", "report", "show", "view", "export"} {
		r := runProcess(t, nil, cmd, "--help")
		if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "Usage: rollout "+cmd) {
			t.Errorf("rollout %s --help: exit %d, stderr %q, stdout %.80q", cmd, r.code, r.stderr, r.stdout)
		}
		// The usage text, its examples, then every flag.
		usage, flags, ok := strings.Cut(r.stdout, "\nFlags:\n  -")
		if !ok || !strings.Contains(usage, "\nExample") || strings.Contains(flags, "Usage:") {
			t.Errorf("rollout %s --help is not usage, examples, then the flags:\n%s", cmd, r.stdout)
		}
	}
	r = runProcess(t, nil, "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "rollout ") || !strings.Contains(r.stdout, ", go1.") {
		t.Errorf("rollout version: exit %d: %q", r.code, r.stdout)
	}
}

// A flag in no group of a command's help is listed under "Other flags": a flag added later is
// never missing from the help.
func TestHelpListsUngroupedFlags(t *testing.T) {
	fs := flag.NewFlagSet("rollout x", flag.ContinueOnError)
	fs.Int("grouped", 1, "a grouped `N`")
	fs.Duration("new-flag", 0, "added later, in no group")
	fs.Bool("sim-a", false, "a knob")
	h := commandHelp{usage: "rollout x", about: "About x.", groups: []flagGroup{
		{title: "Group", names: []string{"grouped"}},
		{title: "Knobs", names: []string{"sim-a"}, brief: "Knobs in brief."},
	}}
	var b strings.Builder
	h.write(&b, fs)
	want := `Usage: rollout x

About x.

Group:
  --grouped N               a grouped N (default 1)

Knobs:
  --sim-a
  Knobs in brief.

Other flags:
  --new-flag duration       added later, in no group
`
	if b.String() != want {
		t.Errorf("help:\n%s\nwant:\n%s", b.String(), want)
	}
}

// rollout run --resume --out DIR alone finishes a run with its own settings (input, arms, steps,
// simulator knobs, repeats, servers), to the same records as a run never stopped; a flag that
// may change (concurrency) is taken, one that changes results still needs --force.
func TestResumeFromManifest(t *testing.T) {
	input := headLines(t, "../../data/workflow.jsonl", 4)
	args := []string{"run", "--input", input, "--arms", "single,workflow", "--steps", "../../data/workflow.steps.json", "--num-repeats", "2",
		"--model-url", "builtin:sim", "--sim-profile", "realistic", "--sim-seed", "3", "--sim-latency", "0", "--server", "builtin:workflow", "--quiet"}
	whole := t.TempDir()
	if r := runCLI(t, context.Background(), nil, append(args, "--out", whole)...); r.code != 0 {
		t.Fatalf("whole run: exit %d: %s", r.code, r.stderr)
	}
	dir := t.TempDir()
	if r := runCLI(t, context.Background(), nil, append(args, "--out", dir)...); r.code != 0 {
		t.Fatalf("run: exit %d: %s", r.code, r.stderr)
	}
	// The run stopped after 5 of its 16 records.
	journal := filepath.Join(dir, rundir.JournalFile)
	lines := strings.SplitAfter(readFile(t, journal), "\n")
	os.WriteFile(journal, []byte(strings.Join(lines[:5], "")), 0o644)
	os.Remove(filepath.Join(dir, rundir.ParquetFile))

	r := runCLI(t, context.Background(), nil, "run", "--resume", "--out", dir, "--num-repeats", "3")
	if r.code != exitUsage || firstLine(r.stderr) != "rollout: --resume: --num-repeats was 2, now 3; pass --force to resume anyway, or choose another --out" {
		t.Errorf("resume with other repeats: exit %d: %s", r.code, r.stderr)
	}
	r = runCLI(t, context.Background(), nil, "run", "--resume", "--out", dir, "--concurrency", "2", "--quiet")
	if r.code != 0 || !strings.Contains(r.stderr, "5 rollouts already have a record") {
		t.Fatalf("resume: exit %d: %s", r.code, r.stderr)
	}
	got, want := readRecords(t, dir), readRecords(t, whole)
	key := func(r record.Record) string { return fmt.Sprintf("%d/%d/%s", r.TaskIndex, r.RolloutIndex, r.Arm) }
	rewards := map[string]float64{}
	for _, r := range want {
		rewards[key(r)] = r.Reward
	}
	if len(got) != 16 || len(want) != 16 {
		t.Fatalf("%d records resumed, %d whole, want 16", len(got), len(want))
	}
	seen := map[string]bool{}
	for _, r := range got {
		if seen[key(r)] {
			t.Errorf("%s: two records", key(r))
		}
		seen[key(r)] = true
		if w, ok := rewards[key(r)]; !ok || w != r.Reward {
			t.Errorf("%s: reward %v after the resume, %v (present %v) in the run never stopped", key(r), r.Reward, w, ok)
		}
	}
	r = runCLI(t, context.Background(), nil, "run", "--resume", "--out", t.TempDir())
	if r.code != exitUsage || !strings.Contains(r.stderr, "holds no run to resume (no manifest.json, no records)") {
		t.Errorf("resume of an empty dir: exit %d: %s", r.code, r.stderr)
	}
}

// rollout show prints one rollout: its record's reward (as the Parquet file has it) and
// components, then its transcript; a wrong task, or a task run by several arms without --arm,
// is one line naming what to pass.
func TestShow(t *testing.T) {
	input := headLines(t, extractionData, 2)
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--arms", "single,multi", "--model-url", "builtin:sim",
		"--server", "builtin:extraction", "--quiet")
	if r.code != 0 {
		t.Fatalf("run: exit %d: %s", r.code, r.stderr)
	}
	var rec record.Record
	for _, x := range readRecords(t, dir) {
		if x.TaskIndex == 0 && x.Arm == "multi" {
			rec = x
		}
	}
	r = runProcess(t, nil, "show", dir, "--task", rec.TaskID, "--arm", "multi")
	if r.code != 0 {
		t.Fatalf("show: exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(r.stdout, "\n")
	if want := "task " + rec.TaskID + " (index 0) · repeat 0 · arm multi · model rollout-sim · server extraction"; lines[0] != want {
		t.Errorf("first line:\n got %s\nwant %s", lines[0], want)
	}
	if want := fmt.Sprintf("reward %g (", rec.Reward); !strings.HasPrefix(lines[2], want) {
		t.Errorf("reward line %q, want it to start %q", lines[2], want)
	}
	for k, v := range rec.RewardComponents {
		if !strings.Contains(lines[2], fmt.Sprintf("%s %g", k, v)) {
			t.Errorf("reward line %q lacks component %s %g", lines[2], k, v)
		}
	}
	for _, want := range []string{"\n[system]\n", "\n[user]\n", "  → list_sources({", "\n[tool list_sources → HTTP 200, ", "\n[tool submit_answer → HTTP 200, ", "\nended: " + rec.Termination + "\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("no %q in:\n%s", want, r.stdout)
		}
	}
	// By index, as well as by id.
	if r2 := runProcess(t, nil, "show", dir, "--task", "0", "--arm", "multi"); r2.stdout != r.stdout {
		t.Errorf("--task 0 shows another rollout than --task %s", rec.TaskID)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"show", dir, "--task", rec.TaskID}, "rollout: show: task " + rec.TaskID + " repeat 0 was run by several arms (multi, single): choose one with --arm\n"},
		{[]string{"show", dir, "--task", "extraction-001"}, `rollout: show: no rollout of task "extraction-001" in ` + dir + " (did you mean extraction-0001 or extraction-0002?)\n"},
		{[]string{"show", dir, "--task", rec.TaskID, "--arm", "multi", "--repeat", "3"}, "rollout: show: task " + rec.TaskID + " has no rollout with --repeat 3 --arm multi in " + dir + " (arms multi, single)\n"},
		{[]string{"show", dir}, "rollout: show: --task ID is required\n"},
		{[]string{"show", filepath.Join(dir, "none"), "--task", "x"}, "rollout: show: " + filepath.Join(dir, "none") + " holds no run (no such file or directory)\n"},
	} {
		r := runProcess(t, nil, tc.args...)
		if r.code != exitUsage || r.stderr != tc.want {
			t.Errorf("%v: exit %d, stderr:\n got %q\nwant %q", tc.args[2:], r.code, r.stderr, tc.want)
		}
	}
}

// A row that offers no tools while its reference_plan calls some is named, FILE:LINE, before the
// run starts; the run goes on.
func TestWarnRowWithoutTools(t *testing.T) {
	src := strings.Split(strings.TrimSpace(readFile(t, headLines(t, extractionData, 3))), "\n")
	src[1] = mutateRow(t, src[1], func(row map[string]any) {
		delete(row["responses_create_params"].(map[string]any), "tools")
	})
	input := filepath.Join(t.TempDir(), "rows.jsonl")
	os.WriteFile(input, []byte(strings.Join(src, "\n")+"\n"), 0o644)
	r := runProcess(t, nil, "run", "--input", input, "--out", t.TempDir(), "--model-url", "builtin:sim", "--server", "builtin:extraction", "--quiet", "--fail-on-error", "1")
	want := "rollout: " + input + ":2: warning: the row offers no tools (responses_create_params.tools) but its reference_plan calls "
	if r.code != 0 || !strings.HasPrefix(r.stderr, want) || strings.Count(r.stderr, "warning:") != 1 {
		t.Errorf("exit %d, stderr:\n%s\nwant it to start %q", r.code, r.stderr, want)
	}
}

// Old flag names keep working, rewritten to the new ones; values and "--" are left alone.
func TestRenameFlags(t *testing.T) {
	renames := map[string]string{"seed": "bootstrap-seed", "latency": "sim-latency"}
	got := renameFlags([]string{"run", "--seed", "3", "-seed=4", "--latency=5ms", "---seed", "--seeds", "seed", "--", "--seed"}, renames)
	want := []string{"run", "--bootstrap-seed", "3", "--bootstrap-seed=4", "--sim-latency=5ms", "---seed", "--seeds", "seed", "--", "--seed"}
	if !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// A manifest's difference is named by its flag; the other differences are left as they are.
func TestFlagDiff(t *testing.T) {
	for in, want := range map[string]string{
		"num_repeats was 1, now 2":                     "--num-repeats was 1, now 2",
		`sim.Seed was "1", now "2"`:                    "--sim-seed was 1, now 2",
		`sim.HTTP429 was unset, now "0.1"`:             "--sim-http-429 was unset, now 0.1",
		`sim.ToolCountErrorSlope was unset, now "0.2"`: "--sim-tool-count-error-slope was unset, now 0.2",
		"servers was [a], now [b]":                     "--server was [a], now [b]",
		"--jsonl-out was unset, now /x/ng.jsonl":       "--jsonl-out was unset, now /x/ng.jsonl",
		"the input differs: a.jsonl (sha256 0123456789ab) was run, this is b.jsonl (sha256 ba9876543210)": "the input differs: a.jsonl (sha256 0123456789ab) was run, this is b.jsonl (sha256 ba9876543210)",
	} {
		if got := flagDiff(in); got != want {
			t.Errorf("flagDiff(%q) = %q, want %q", in, got, want)
		}
	}
}

// A model URL with a password is not kept in the manifest: a resume must be given it again.
func TestResumeAsksForSecretURL(t *testing.T) {
	m := newFakeModel(t, weatherModel)
	withSecret := strings.Replace(m.URL, "http://", "http://user:pass1234@", 1) + "/v1"
	dir := t.TempDir()
	args := []string{"run", "--input", weatherRows(t, 2, ""), "--out", dir, "--model-url", withSecret, "--model", "m",
		"--server", "builtin:example_single_tool_call", "--quiet"}
	if r := runCLI(t, context.Background(), nil, args...); r.code != 0 {
		t.Fatalf("run: exit %d: %s", r.code, r.stderr)
	}
	r := runCLI(t, context.Background(), nil, "run", "--resume", "--out", dir)
	if want := "rollout: --resume: the run's --model-url held a password or query values, which manifest.json does not keep: give --model-url again\n"; r.code != exitUsage || r.stderr != want {
		t.Errorf("exit %d, stderr %q, want %q", r.code, r.stderr, want)
	}
	if r := runCLI(t, context.Background(), nil, "run", "--resume", "--out", dir, "--model-url", withSecret, "--quiet"); r.code != 0 || !strings.Contains(r.stderr, "2 rollouts already have a record") {
		t.Errorf("resume with --model-url: exit %d: %s", r.code, r.stderr)
	}
}

// Ctrl-C while the preflight waits for a silent endpoint: exit 130 and nothing written.
func TestInterruptDuringPreflight(t *testing.T) {
	silent, accepted := testnet.Silent(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for accepted() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	out := filepath.Join(t.TempDir(), "out")
	r := runCLI(t, ctx, nil, "run", "--input", weatherRows(t, 2, ""), "--out", out, "--model-url", silent+"/v1", "--model", "m",
		"--server", "builtin:example_single_tool_call")
	if r.code != exitInterrupted || r.stderr != "rollout: interrupted before the run started: nothing was written\n" {
		t.Errorf("exit %d: %q", r.code, r.stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("--out was created (%v)", err)
	}
}
