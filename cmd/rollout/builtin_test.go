package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/redistest"
	"github.com/rollout-dev/rollout/pkg/servers"
	"github.com/rollout-dev/rollout/pkg/servers/gym"
)

const extractionData = "../../data/extraction.jsonl"

// headLines copies the first n lines of src to a file in a temporary directory.
func headLines(t *testing.T, src string, n int) string {
	t.Helper()
	lines := strings.SplitAfter(readFile(t, src), "\n")
	p := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.WriteFile(p, []byte(strings.Join(lines[:n], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The simulator, started in-process by --model-url builtin:sim, plays each extraction task's
// reference plan against the built-in extraction server: every rollout scores 1. Its knobs
// reach it: with every round's arguments perturbed, rewards fall.
func TestRunBuiltinSim(t *testing.T) {
	input := headLines(t, extractionData, 20)
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--model-url", "builtin:sim",
		"--server", "builtin:extraction", "--concurrency", "8", "--quiet")
	if r.code != 0 {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	recs := readRecords(t, dir)
	if len(recs) != 20 {
		t.Fatalf("%d records, want 20", len(recs))
	}
	for _, rec := range recs {
		if !rec.HasReward || rec.Reward != 1 || rec.Model != "rollout-sim" || rec.Agent != "extraction" || rec.Rounds < 3 {
			t.Errorf("task %d: reward %v (%q %s) model %q agent %q rounds %d", rec.TaskIndex, rec.Reward, rec.FailureClass, rec.Error, rec.Model, rec.Agent, rec.Rounds)
		}
	}

	dir = t.TempDir()
	r = runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--model-url", "builtin:sim",
		"--server", "builtin:extraction", "--quiet", "--sim-wrong-argument", "1")
	if r.code != 0 {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	for _, rec := range readRecords(t, dir) {
		if rec.Reward >= 1 {
			t.Errorf("task %d: reward %v with every argument wrong", rec.TaskIndex, rec.Reward)
		}
	}

	for _, args := range [][]string{
		{"--sim-profile", "perfect"},
		{"--sim-wrong-argument", "1.5"},
		{"--sim-latency", "soon"},
	} {
		r := runCLI(t, context.Background(), nil, append([]string{"run", "--input", input, "--out", t.TempDir(), "--model-url", "builtin:sim", "--server", "builtin:extraction"}, args...)...)
		if r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d; stderr %s", args, r.code, exitUsage, r.stderr)
		}
	}
	r = runCLI(t, context.Background(), nil, "run", "--input", "-", "--out", t.TempDir(), "--model-url", "builtin:sim", "--server", "builtin:extraction")
	if r.code != exitUsage || !strings.Contains(r.stderr, "not from stdin") {
		t.Errorf("builtin:sim with stdin: exit %d, stderr %s", r.code, r.stderr)
	}
}

// `rollout sim` serves the simulator on its own: a run pointed at its URL scores like the
// in-process one, and Ctrl-C stops it cleanly.
func TestSimCommand(t *testing.T) {
	input := headLines(t, extractionData, 10)
	done := make(chan int, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	go func() {
		done <- run(ctx, []string{"sim", "--tasks", input, "--seed", "3"}, env{stdout: pw, stderr: io.Discard, getenv: func(string) string { return "" }})
		pw.Close()
	}()
	url, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no URL from rollout sim: %v", err)
	}
	go io.Copy(io.Discard, pr)
	url = strings.TrimSpace(url)
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/v1") {
		t.Fatalf("sim printed %q, want a loopback /v1 URL", url)
	}
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--model-url", url, "--model", "rollout-sim", "--server", "builtin:extraction", "--quiet")
	if r.code != 0 {
		t.Fatalf("run: exit %d\nstderr: %s", r.code, r.stderr)
	}
	for _, rec := range readRecords(t, dir) {
		if rec.Reward != 1 {
			t.Errorf("task %d: reward %v (%s)", rec.TaskIndex, rec.Reward, rec.Error)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("sim exited %d after Ctrl-C, want 0", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sim did not stop after Ctrl-C")
	}

	if r := runCLI(t, context.Background(), nil, "sim", "--tasks", filepath.Join(t.TempDir(), "none.jsonl")); r.code != exitUsage || !strings.Contains(r.stderr, "none.jsonl") {
		t.Errorf("missing task file: exit %d, stderr %s", r.code, r.stderr)
	}
}

// `rollout gen` writes the same bytes for the same seed, other bytes for another, and the
// committed data files are what it writes.
func TestGen(t *testing.T) {
	a := runCLI(t, context.Background(), nil, "gen", "extraction", "--n", "5", "--seed", "7")
	b := runCLI(t, context.Background(), nil, "gen", "extraction", "--n", "5", "--seed", "7")
	c := runCLI(t, context.Background(), nil, "gen", "extraction", "--n", "5", "--seed", "8")
	if a.code != 0 || a.stdout == "" || a.stdout != b.stdout {
		t.Fatalf("same seed: exit %d, outputs differ or empty; stderr %s", a.code, a.stderr)
	}
	if a.stdout == c.stdout {
		t.Error("seeds 7 and 8 wrote the same tasks")
	}
	if n := strings.Count(a.stdout, "\n"); n != 5 {
		t.Errorf("--n 5 wrote %d lines", n)
	}
	for _, name := range []string{"extraction", "workflow"} {
		out := filepath.Join(t.TempDir(), name+".jsonl")
		r := runCLI(t, context.Background(), nil, "gen", name, "-o", out)
		if r.code != 0 {
			t.Fatalf("gen %s: exit %d: %s", name, r.code, r.stderr)
		}
		if readFile(t, out) != readFile(t, "../../data/"+name+".jsonl") {
			t.Errorf("data/%s.jsonl is not what `rollout gen %s` writes: run make data", name, name)
		}
	}
	for _, args := range [][]string{{"gen"}, {"gen", "nope"}, {"gen", "extraction", "--n", "-1"}, {"gen", "extraction", "-o", "/nonexistent/dir/x.jsonl"}} {
		if r := runCLI(t, context.Background(), nil, args...); r.code == 0 {
			t.Errorf("%v: exit 0", args)
		}
	}
}

// `rollout validate` lints (problems on stdout as FILE:LINE, exit 3) and, with --oracle, proves
// the plans: a plan with a call the task does not need, and a plan that does not solve its
// task, are both caught at their lines.
func TestValidate(t *testing.T) {
	input := headLines(t, extractionData, 6)
	// The rows name their server (agent_ref.name "extraction"), a built-in one: no --server.
	r := runCLI(t, context.Background(), nil, "validate", input, "--oracle")
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("good tasks: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "oracle: 6 tasks") {
		t.Errorf("stderr does not report the oracle: %s", r.stderr)
	}

	lines := strings.Split(strings.TrimSpace(readFile(t, input)), "\n")
	// Line 2: an extra call that changes nothing (a repeat of the first call, in a round of
	// its own at the end). Line 4: the answer's values reversed, so the plan scores 0.
	lines[1] = mutateRow(t, lines[1], func(row map[string]any) {
		p := row["reference_plan"].(map[string]any)
		rounds := p["rounds"].([]any)
		first := rounds[0].([]any)[0]
		p["rounds"] = append(rounds[:len(rounds)-1:len(rounds)-1], []any{first}, rounds[len(rounds)-1])
	})
	lines[3] = mutateRow(t, lines[3], func(row map[string]any) {
		p := row["reference_plan"].(map[string]any)
		rounds := p["rounds"].([]any)
		last := rounds[len(rounds)-1].([]any)[0].(map[string]any)
		args := last["arguments"].(map[string]any)
		for k, v := range args {
			if vs, ok := v.([]any); ok && len(vs) > 1 {
				for i, j := 0, len(vs)-1; i < j; i, j = i+1, j-1 {
					vs[i], vs[j] = vs[j], vs[i]
				}
				args[k] = vs
			}
		}
	})
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(bad, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	r = runCLI(t, context.Background(), nil, "validate", bad, "--oracle", "--server", "builtin:extraction")
	if r.code != exitChecks {
		t.Fatalf("bad plans: exit %d, want %d\nstdout: %s\nstderr: %s", r.code, exitChecks, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, bad+":2: reference_plan: without call") || !strings.Contains(r.stdout, "not needed") {
		t.Errorf("the unneeded call on line 2 is not reported:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, bad+":4: reference_plan: the reference plan scores 0") {
		t.Errorf("the failing plan on line 4 is not reported:\n%s", r.stdout)
	}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if !strings.HasPrefix(line, bad+":2:") && !strings.HasPrefix(line, bad+":4:") {
			t.Errorf("unexpected problem: %s", line)
		}
	}

	// Lint errors: exit 3, FILE:LINE on stdout, no oracle run.
	lint := filepath.Join(t.TempDir(), "lint.jsonl")
	os.WriteFile(lint, []byte(lines[0]+"\n{\"responses_create_params\": {\"input\": 5}}\n"), 0o644)
	r = runCLI(t, context.Background(), nil, "validate", lint)
	if r.code != exitChecks || !strings.HasPrefix(r.stdout, lint+":2: responses_create_params.input") {
		t.Errorf("lint: exit %d stdout %q", r.code, r.stdout)
	}
	// --oracle needs to know the server when rows do not name one.
	anon := filepath.Join(t.TempDir(), "anon.jsonl")
	os.WriteFile(anon, []byte(mutateRow(t, lines[0], func(row map[string]any) { delete(row, "agent_ref") })+"\n"), 0o644)
	r = runCLI(t, context.Background(), nil, "validate", anon, "--oracle")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--server") {
		t.Errorf("no server: exit %d stderr %s", r.code, r.stderr)
	}
	if r := runCLI(t, context.Background(), nil, "validate"); r.code != exitUsage {
		t.Errorf("no file: exit %d", r.code)
	}
}

// Two tasks with the same prompt and different worlds (as `rollout gen` writes at two seeds)
// each get their own reference plan from the simulator: validate --oracle finds every plan
// sound, in one file holding both seeds' rows of each shared question, and rollout run against
// builtin:sim scores them all 1.
func TestSamePromptOtherWorld(t *testing.T) {
	dir := t.TempDir()
	gen := func(seed string) []string {
		path := filepath.Join(dir, "seed"+seed+".jsonl")
		if r := runCLI(t, context.Background(), nil, "gen", "extraction", "--seed", seed, "--n", "200", "-o", path); r.code != 0 {
			t.Fatalf("gen --seed %s: exit %d: %s", seed, r.code, r.stderr)
		}
		return strings.Split(strings.TrimSpace(readFile(t, path)), "\n")
	}
	question := func(line string) (q string) {
		mutateRow(t, line, func(row map[string]any) {
			q = row["responses_create_params"].(map[string]any)["input"].([]any)[0].(map[string]any)["content"].(string)
		})
		return q
	}
	first := map[string]string{}
	for _, line := range gen("1") {
		first[question(line)] = line
	}
	var rows []string
	for _, line := range gen("2") {
		if other, ok := first[question(line)]; ok {
			rows = append(rows, other, mutateRow(t, line, func(row map[string]any) { row["id"] = "seed2-" + row["id"].(string) }))
		}
	}
	if len(rows) < 4 || rows[0] == rows[1] {
		t.Fatalf("%d rows share a question across the seeds: the generator no longer repeats questions, find another pair", len(rows))
	}
	input := filepath.Join(dir, "both.jsonl")
	os.WriteFile(input, []byte(strings.Join(rows, "\n")+"\n"), 0o644)
	r := runCLI(t, context.Background(), nil, "validate", input, "--oracle")
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("validate --oracle: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	out := filepath.Join(dir, "out")
	r = runCLI(t, context.Background(), nil, "run", "--input", input, "--out", out, "--quiet", "--model-url", "builtin:sim", "--sim-profile", "none", "--server", "builtin:extraction")
	if r.code != 0 {
		t.Fatalf("run: exit %d: %s", r.code, r.stderr)
	}
	var sum struct {
		Rollouts   int     `json:"rollouts"`
		MeanReward float64 `json:"mean_reward"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(out, "summary.json"))), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Rollouts != len(rows) || sum.MeanReward != 1 {
		t.Fatalf("run against builtin:sim: %d rollouts, mean reward %v; want %d and 1", sum.Rollouts, sum.MeanReward, len(rows))
	}
}

// The simulator writes a call's arguments in the order of its tool's schema properties (as
// llama-server's tool-call grammar makes a model write them), not sorted, and the SFT export
// keeps the order the model wrote: the tools' own property order, call after call, from the
// simulator through the run directory to the export. Arm single makes random schema-valid calls,
// arm multi plays the plans.
func TestArgumentsInSchemaOrder(t *testing.T) {
	dir := t.TempDir()
	input := headLines(t, extractionData, 8)
	out := filepath.Join(dir, "out")
	r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", out, "--quiet", "--arms", "single,multi",
		"--model-url", "builtin:sim", "--sim-profile", "none", "--server", "builtin:extraction")
	if r.code != 0 {
		t.Fatalf("run: exit %d: %s", r.code, r.stderr)
	}
	sft := filepath.Join(dir, "sft.jsonl")
	if r := runCLI(t, context.Background(), nil, "export", out, "--format", "sft", "-o", sft); r.code != 0 {
		t.Fatalf("export: exit %d: %s", r.code, r.stderr)
	}
	// keys is the object's keys in the order written.
	keys := func(raw string) []string {
		dec := json.NewDecoder(strings.NewReader(raw))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			t.Fatalf("not an object: %s", raw)
		}
		var ks []string
		for dec.More() {
			k, _ := dec.Token()
			ks = append(ks, k.(string))
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("%s: %v", raw, err)
			}
		}
		return ks
	}
	type row struct {
		Messages []struct {
			ToolCalls []struct {
				Function struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"` // an object (JSONL) or its JSON text
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
		Tools json.RawMessage `json:"tools"` // a list, or its JSON text
	}
	type tool struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	calls, unsorted := 0, 0
	for i, line := range strings.Split(strings.TrimSpace(readFile(t, sft)), "\n") {
		var rw row
		if err := json.Unmarshal([]byte(line), &rw); err != nil {
			t.Fatalf("sft line %d: %v", i+1, err)
		}
		var tools []tool
		raw := []byte(rw.Tools)
		var text string
		if json.Unmarshal(raw, &text) == nil {
			raw = []byte(text)
		}
		if err := json.Unmarshal(raw, &tools); err != nil || len(tools) == 0 {
			t.Fatalf("sft line %d: tools %s: %v", i+1, rw.Tools, err)
		}
		order := map[string][]string{}
		for _, tl := range tools {
			var p struct{ Properties json.RawMessage }
			json.Unmarshal(tl.Function.Parameters, &p)
			order[tl.Function.Name] = keys(string(p.Properties))
		}
		for _, m := range rw.Messages {
			for _, tc := range m.ToolCalls {
				args := string(tc.Function.Arguments)
				var text string
				if json.Unmarshal(tc.Function.Arguments, &text) == nil {
					args = text
				}
				got := keys(args)
				var want []string
				for _, k := range order[tc.Function.Name] {
					if slices.Contains(got, k) {
						want = append(want, k)
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("sft line %d: %s(%s): keys %v, want the schema's order %v", i+1, tc.Function.Name, args, got, want)
				}
				calls++
				if !slices.IsSorted(got) {
					unsorted++
				}
			}
		}
	}
	if calls == 0 || unsorted == 0 {
		t.Fatalf("%d calls, %d not in sorted order: the check cannot tell schema order from sorted", calls, unsorted)
	}
}

func mutateRow(t *testing.T, line string, fn func(map[string]any)) string {
	t.Helper()
	var row map[string]any
	if err := json.Unmarshal([]byte(line), &row); err != nil {
		t.Fatal(err)
	}
	fn(row)
	b, err := json.Marshal(row)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The built-in servers keep their sessions in Redis with --session-store: the stateful NeMo
// Gym example scores as with memory. An unreachable store is a usage error naming it.
func TestRunSessionStoreRedis(t *testing.T) {
	url := redistest.Start(t)
	dir := t.TempDir()
	args := append([]string{"run", "--input", examples, "--out", dir, "--model-url", "replay:" + exampleRollouts,
		"--session-store", url, "--quiet"}, builtinServers...)
	r := runCLI(t, context.Background(), nil, args...)
	if r.code != 0 {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	for _, rec := range readRecords(t, dir) {
		if rec.Reward != 1 {
			t.Errorf("task %d (%s): reward %v (%s)", rec.TaskIndex, rec.Agent, rec.Reward, rec.Error)
		}
	}
	r = runCLI(t, context.Background(), nil, append([]string{"run", "--input", examples, "--out", t.TempDir(), "--model-url", "replay:" + exampleRollouts,
		"--session-store", "redis://127.0.0.1:1/0"}, builtinServers...)...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "127.0.0.1:1") {
		t.Errorf("unreachable Redis: exit %d stderr %s", r.code, r.stderr)
	}
	r = runCLI(t, context.Background(), nil, "serve", "counter", "--session-store", "mongodb://x")
	if r.code != exitUsage || !strings.Contains(r.stderr, "mongodb://x") {
		t.Errorf("unknown store: exit %d stderr %s", r.code, r.stderr)
	}
}

// A server given by URL is sent /end_session for every rollout when it says it takes it (the
// header rollout's own servers put on their seed_session and verify answers), or with
// --end-sessions; a server that does not say so (NeMo Gym's) never sees /end_session without
// the flag.
func TestRunEndSessions(t *testing.T) {
	for _, tc := range []struct {
		says, flag bool
		want       int64
	}{{false, false, 0}, {false, true, 7}, {true, false, 7}} {
		h, err := servers.New("example_single_tool_call", servers.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var ended atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/end_session" {
				ended.Add(1)
			}
			if !tc.says {
				w = withoutHeader{w, gym.EndSessionHeader}
			}
			h.ServeHTTP(w, r)
		}))
		m := newFakeModel(t, weatherModel)
		args := []string{"run", "--input", weatherRows(t, 7, ""), "--out", t.TempDir(), "--model-url", m.URL + "/v1", "--model", "m", "--server", srv.URL, "--quiet"}
		if tc.flag {
			args = append(args, "--end-sessions")
		}
		r := runCLI(t, context.Background(), nil, args...)
		srv.Close()
		h.Close()
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if ended.Load() != tc.want {
			t.Errorf("the server says it takes /end_session: %v, --end-sessions: %v: %d sessions ended, want %d", tc.says, tc.flag, ended.Load(), tc.want)
		}
	}
}

// withoutHeader drops the header name from an answer, as a server that does not send it.
type withoutHeader struct {
	http.ResponseWriter
	name string
}

func (w withoutHeader) WriteHeader(code int) {
	w.Header().Del(w.name)
	w.ResponseWriter.WriteHeader(code)
}

func (w withoutHeader) Write(b []byte) (int, error) {
	w.Header().Del(w.name)
	return w.ResponseWriter.Write(b)
}

// --retry-budget bounds the retries of a whole rollout, whatever --retries allows each call;
// -1 leaves only the per-call bound.
func TestRunRetryBudget(t *testing.T) {
	m := newFakeModel(t, func(w http.ResponseWriter, _ map[string]any, _ int64) {
		w.Header().Set("Retry-After", "0")
		http.Error(w, `{"error":{"message":"slow down","type":"rate_limit"}}`, 429)
	})
	for _, tc := range []struct {
		budget   string
		attempts int32 // seed_session + model attempts
	}{{"3", 1 + 4}, {"0", 1 + 1}, {"-1", 1 + 8}} {
		dir := t.TempDir()
		r := runCLI(t, context.Background(), nil, "run", "--input", weatherRows(t, 2, ""), "--out", dir,
			"--model-url", m.URL+"/v1", "--model", "m", "--server", "builtin:example_single_tool_call",
			"--retries", "7", "--retry-budget", tc.budget, "--quiet")
		if r.code != exitTransient { // every rollout failed, rate_limited: transient
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		for _, rec := range readRecords(t, dir) {
			if rec.FailureClass != "rate_limited" || rec.Attempts != tc.attempts {
				t.Errorf("--retry-budget %s: class %q attempts %d, want rate_limited and %d (%s)", tc.budget, rec.FailureClass, rec.Attempts, tc.attempts, rec.Error)
			}
			if tc.budget == "3" && !strings.Contains(rec.Error, "retry budget") {
				t.Errorf("error %q does not say the budget was spent", rec.Error)
			}
		}
	}
}

// --arms runs every arm on every (task, repeat) with the same seed; the arm column tells the
// records apart. On extraction tasks, which need sequential calls, single-step (one round of
// tools, then an answer without them) cannot get the values and multi-step can.
func TestRunArms(t *testing.T) {
	input := headLines(t, extractionData, 12)
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--model-url", "builtin:sim",
		"--server", "builtin:extraction", "--arms", "single,multi", "--num-repeats", "2", "--quiet")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	recs := readRecords(t, dir)
	if len(recs) != 12*2*2 {
		t.Fatalf("%d records, want 48", len(recs))
	}
	type key struct{ task, rollout int64 }
	seeds := map[key]map[string]int64{}
	reward := map[string]float64{}
	for _, rec := range recs {
		k := key{rec.TaskIndex, rec.RolloutIndex}
		if seeds[k] == nil {
			seeds[k] = map[string]int64{}
		}
		if _, dup := seeds[k][rec.Arm]; dup {
			t.Errorf("two records for %v arm %s", k, rec.Arm)
		}
		seeds[k][rec.Arm] = rec.Seed
		reward[rec.Arm] += rec.Reward
		if rec.Arm == "single" && rec.Rounds > 2 {
			t.Errorf("single-step rollout %v took %d rounds", k, rec.Rounds)
		}
	}
	for k, by := range seeds {
		if len(by) != 2 || by["single"] != by["multi"] {
			t.Errorf("%v: seeds by arm %v, want the same seed in both arms", k, by)
		}
	}
	if reward["multi"] != 24 || reward["single"] >= reward["multi"] {
		t.Errorf("total reward: multi %v (want 24), single %v", reward["multi"], reward["single"])
	}
	for _, args := range [][]string{{"--arms", "single,chain"}, {"--arms", "multi,multi"}, {"--arms", "workflow"}, {"--arms", "single", "--arm", "x"}} {
		r := runCLI(t, context.Background(), nil, append([]string{"run", "--input", input, "--out", t.TempDir(), "--model-url", "builtin:sim", "--server", "builtin:extraction"}, args...)...)
		if r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d: %s", args, r.code, exitUsage, r.stderr)
		}
	}
}

// The workflow arm runs the steps of --steps against the workflow server; the simulator plays
// the plan step by step (it leaves out planned calls whose tool a step does not offer).
// --tool-mode json reaches the agent: the simulator does not answer in the JSON format, so
// every rollout ends as invalid_output after its invalid answers.
func TestRunWorkflowArm(t *testing.T) {
	input := headLines(t, "../../data/workflow.jsonl", 5)
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--model-url", "builtin:sim",
		"--server", "builtin:workflow", "--arms", "multi,workflow", "--steps", "../../data/workflow.steps.json", "--quiet")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	by := map[string]int{}
	for _, rec := range readRecords(t, dir) {
		by[rec.Arm]++
		if rec.Reward != 1 {
			t.Errorf("%s rollout %d: reward %v (%s %s)", rec.Arm, rec.TaskIndex, rec.Reward, rec.Termination, rec.Error)
		}
	}
	if by["multi"] != 5 || by["workflow"] != 5 {
		t.Errorf("records by arm %v", by)
	}
	if !strings.Contains(readFile(t, filepath.Join(dir, "trajectories.jsonl")), `"steps":[{"name":"discovery"`) {
		t.Error("the workflow trajectories have no step traces")
	}

	dir = t.TempDir()
	r = runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--model-url", "builtin:sim",
		"--server", "builtin:workflow", "--tool-mode", "json", "--quiet")
	if r.code != 0 {
		t.Fatalf("json mode: exit %d: %s", r.code, r.stderr)
	}
	for _, rec := range readRecords(t, dir) {
		if rec.Termination != "invalid_output" || rec.ToolCalls != 0 {
			t.Errorf("json mode with the simulator: termination %q, %d tool calls", rec.Termination, rec.ToolCalls)
		}
	}
	for _, args := range [][]string{
		{"--arms", "workflow"},
		{"--arms", "workflow", "--steps", filepath.Join(t.TempDir(), "none.json")},
		{"--tool-mode", "xml"},
	} {
		r := runCLI(t, context.Background(), nil, append([]string{"run", "--input", input, "--out", t.TempDir(), "--model-url", "builtin:sim", "--server", "builtin:workflow"}, args...)...)
		if r.code != exitUsage {
			t.Errorf("%v: exit %d: %s", args, r.code, r.stderr)
		}
	}
}
