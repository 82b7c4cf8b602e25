package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/redistest"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// Two processes writing one --out: while a run holds it, a --resume of the same run is refused
// at once, naming the holder's pid, and the first run ends with exactly one record per rollout.
// (The lock dies with its process: TestKill9Resume resumes after each kill -9.)
func TestConcurrentWritersRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary twice")
	}
	bin := buildRollout(t)
	input := headLines(t, extractionData, 60)
	dir := t.TempDir()
	// About 4 s of work: the second processes start and end well within it.
	args := []string{"run", "--input", input, "--out", dir, "--model-url", "builtin:sim", "--server", "builtin:extraction",
		"--quiet", "--concurrency", "4", "--sim-latency", "50ms"}
	first, firstErr, waited := startRollout(t, bin, args...)
	for strings.Count(readFileOr(filepath.Join(dir, rundir.JournalFile)), "\n") < 1 {
		time.Sleep(10 * time.Millisecond)
	}
	for _, extra := range [][]string{{"--resume"}, {"--overwrite"}} {
		second, secondErr, secondDone := startRollout(t, bin, append(append([]string{}, args...), extra...)...)
		<-secondDone
		if code := second.ProcessState.ExitCode(); code != exitTransient {
			t.Errorf("%v while another run writes --out: exit %d, want %d", extra, code, exitTransient)
		}
		if want := "in use by process " + strconv.Itoa(first.Process.Pid); !strings.Contains(secondErr.String(), want) {
			t.Errorf("%v: the refusal does not name the holder (%q): %s", extra, want, secondErr.String())
		}
	}
	if err := <-waited; err != nil {
		t.Fatalf("the first run: %v\n%s", err, firstErr.String())
	}
	checkExactlyOnce(t, dir, 60, 1)
}

// --jsonl-out with three arms, interrupted and resumed twice: the file ends with exactly one line
// per scored (task, rollout, arm), every arm's lines kept.
func TestJSONLOutThreeArmsResume(t *testing.T) {
	input := headLines(t, "../../data/workflow.jsonl", 12)
	dir := t.TempDir()
	jsonl := filepath.Join(t.TempDir(), "rollouts.jsonl")
	args := []string{"run", "--input", input, "--out", dir, "--model-url", "builtin:sim", "--server", "builtin:workflow",
		"--arms", "single,multi,workflow", "--steps", "../../data/workflow.steps.json", "--jsonl-out", jsonl,
		"--quiet", "--concurrency", "3", "--sim-latency", "2ms"}
	for i := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			for strings.Count(readFileOr(filepath.Join(dir, rundir.JournalFile)), "\n") < 8*(i+1) {
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
		}()
		a := args
		if i > 0 {
			a = append(append([]string{}, args...), "--resume")
		}
		if r := runCLI(t, ctx, nil, a...); r.code != exitInterrupted && r.code != 0 {
			t.Fatalf("run %d: exit %d: %s", i, r.code, r.stderr)
		}
		cancel()
	}
	if r := runCLI(t, context.Background(), nil, append(args, "--resume")...); r.code != 0 {
		t.Fatalf("final resume: exit %d: %s", r.code, r.stderr)
	}
	want := map[string]bool{}
	for _, rec := range readRecords(t, dir) {
		if rec.HasReward {
			want[fmt.Sprintf("%d/%d/%s", rec.TaskIndex, rec.RolloutIndex, rec.Arm)] = true
		}
	}
	got := map[string]int{}
	arms := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, jsonl)), "\n") {
		var l struct {
			Task    int64  `json:"_ng_task_index"`
			Rollout int64  `json:"_ng_rollout_index"`
			Arm     string `json:"_ng_arm"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		got[fmt.Sprintf("%d/%d/%s", l.Task, l.Rollout, l.Arm)]++
		arms[l.Arm]++
	}
	for k := range want {
		if got[k] != 1 {
			t.Errorf("%s: %d lines, want 1", k, got[k])
		}
	}
	if len(got) != len(want) || len(want) < 30 || len(arms) != 3 {
		t.Errorf("%d distinct lines for %d scored rollouts; lines by arm %v", len(got), len(want), arms)
	}
}

// No output may write over the input or another output: each case is refused before anything
// is written, and the input is left as it was.
func TestOutputPathsRefused(t *testing.T) {
	base := t.TempDir()
	input := filepath.Join(base, "tasks.jsonl")
	os.WriteFile(input, []byte(headLinesText(t, extractionData, 3)), 0o644)
	os.Symlink(input, filepath.Join(base, "link.jsonl"))
	os.Link(input, filepath.Join(base, "hard.jsonl"))
	out := filepath.Join(base, "out")
	before := readFile(t, input)
	tests := []struct {
		name      string
		out, json string
		want      string
	}{
		{"jsonl-out is the input", out, input, "is the input"},
		{"jsonl-out is a symlink to the input", out, filepath.Join(base, "link.jsonl"), "is the input"},
		{"jsonl-out is a hard link to the input", out, filepath.Join(base, "hard.jsonl"), "is the input"},
		{"jsonl-out through a symlinked directory", out, filepath.Join(base, "dirlink", "tasks.jsonl"), "is the input"},
		{"jsonl-out is the journal", out, filepath.Join(out, rundir.JournalFile), "one of the files rollout writes"},
		{"jsonl-out is the Parquet file", out, filepath.Join(out, rundir.ParquetFile), "one of the files rollout writes"},
		{"jsonl-out is --out", out, out, "is --out"},
		{"--out contains the input", base, "", "contains the input"},
		{"--out is a symlink to the input's directory", filepath.Join(base, "dirlink"), "", "contains the input"},
	}
	os.Symlink(base, filepath.Join(base, "dirlink"))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"run", "--input", input, "--out", tt.out, "--model-url", "builtin:sim", "--server", "builtin:extraction", "--quiet", "--overwrite"}
			if tt.json != "" {
				args = append(args, "--jsonl-out", tt.json)
			}
			r := runCLI(t, context.Background(), nil, args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d, want %d with %q: %s", r.code, exitUsage, tt.want, r.stderr)
			}
			if readFile(t, input) != before {
				t.Fatal("the input changed")
			}
			if _, err := os.Stat(filepath.Join(tt.out, rundir.ManifestFile)); err == nil {
				t.Error("a manifest was written")
			}
		})
	}
}

func headLinesText(t *testing.T, src string, n int) string {
	t.Helper()
	return readFile(t, headLines(t, src, n))
}

// The --jsonl-out file belongs to the run: an existing one is refused (and left as it was)
// unless --overwrite; it is recorded in the manifest; a resume with another one is refused;
// and it is made from the journal at the end, replacing what was there.
func TestJSONLOutBelongsToTheRun(t *testing.T) {
	input := headLines(t, extractionData, 6)
	dir := t.TempDir()
	jsonl := filepath.Join(t.TempDir(), "ng.jsonl")
	os.WriteFile(jsonl, []byte(`{"reward":1,"_ng_task_index":0,"_ng_rollout_index":0}`+"\n"), 0o644)
	args := []string{"run", "--input", input, "--out", dir, "--model-url", "builtin:sim", "--server", "builtin:extraction", "--quiet", "--jsonl-out", jsonl}
	r := runCLI(t, context.Background(), nil, args...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "--jsonl-out "+jsonl+" already exists") {
		t.Fatalf("an existing --jsonl-out: exit %d: %s", r.code, r.stderr)
	}
	if n := strings.Count(readFile(t, jsonl), "\n"); n != 1 {
		t.Fatalf("the refused run touched the file: %d lines", n)
	}
	if r := runCLI(t, context.Background(), nil, append(args, "--overwrite")...); r.code != 0 {
		t.Fatalf("--overwrite: exit %d: %s", r.code, r.stderr)
	}
	if n := strings.Count(readFile(t, jsonl), "\n"); n != 6 || strings.Contains(readFile(t, jsonl), `"_ng_rollout_index":0}`) {
		t.Errorf("after --overwrite: %d lines (want 6, each with its arm):\n%s", n, readFile(t, jsonl))
	}
	mf, err := rundir.ReadManifest(dir)
	if err != nil || mf.JSONLOutPath(dir) != rundir.ResolvePath(jsonl) || filepath.IsAbs(mf.JSONLOut) {
		t.Errorf("manifest jsonl_out %q, want %q (%v)", mf.JSONLOut, jsonl, err)
	}
	other := filepath.Join(t.TempDir(), "other.jsonl")
	r = runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--model-url", "builtin:sim", "--server", "builtin:extraction", "--quiet", "--jsonl-out", other, "--resume")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--jsonl-out was "+rundir.ResolvePath(jsonl)) {
		t.Errorf("resume with another --jsonl-out: exit %d: %s", r.code, r.stderr)
	}
	// A resume of the finished run rebuilds the file: a line someone appended is gone.
	f, _ := os.OpenFile(jsonl, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"reward":0,"_ng_task_index":0,"_ng_rollout_index":0,"_ng_arm":"multi"}` + "\n")
	f.Close()
	if r := runCLI(t, context.Background(), nil, append(args, "--resume")...); r.code != 0 {
		t.Fatalf("resume: exit %d: %s", r.code, r.stderr)
	}
	if n := strings.Count(readFile(t, jsonl), "\n"); n != 6 || strings.Contains(readFile(t, jsonl), `"reward":0`) {
		t.Errorf("after resume: %d lines:\n%s", n, readFile(t, jsonl))
	}
}

// What a resume says and repairs: a run without manifest.json is refused with how to recover
// (and --force recovers it, keeping the records); a stale rollouts.parquet.tmp is removed; a
// plain --resume says how many cancelled records it keeps.
func TestResumeRecoveryMessages(t *testing.T) {
	input := headLines(t, extractionData, 12)
	dir := t.TempDir()
	args := []string{"run", "--input", input, "--out", dir, "--model-url", "builtin:sim", "--server", "builtin:extraction",
		"--quiet", "--concurrency", "4", "--sim-latency", "300ms", "--drain-timeout", "1ms"}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for strings.Count(readFileOr(filepath.Join(dir, rundir.JournalFile)), "\n") < 1 {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		cancel()
	}()
	if r := runCLI(t, ctx, nil, args...); r.code != exitInterrupted {
		t.Fatalf("interrupted run: exit %d: %s", r.code, r.stderr)
	}
	cancelled := 0
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, rundir.JournalFile))), "\n") {
		if strings.Contains(line, `"failure_class":"cancelled"`) {
			cancelled++
		}
	}
	if cancelled == 0 {
		t.Fatal("the interrupt left no cancelled record")
	}
	records := strings.Count(readFile(t, filepath.Join(dir, rundir.JournalFile)), "\n")
	os.Remove(filepath.Join(dir, rundir.ManifestFile))
	os.WriteFile(filepath.Join(dir, rundir.ParquetFile+".tmp"), []byte("half a parquet file"), 0o644)

	r := runCLI(t, context.Background(), nil, append(args, "--resume")...)
	if r.code != exitUsage || !strings.Contains(r.stderr, fmt.Sprintf("%d records in journal.jsonl but no manifest.json", records)) || !strings.Contains(r.stderr, "--resume --force") {
		t.Fatalf("resume without a manifest: exit %d: %s", r.code, r.stderr)
	}
	r = runCLI(t, context.Background(), nil, append(args, "--resume", "--force", "--sim-latency", "0")...)
	if r.code != exitTransient { // the cancelled records kept are failed rollouts (transient), past --fail-on-error
		t.Fatalf("resume --force: exit %d: %s", r.code, r.stderr)
	}
	if want := fmt.Sprintf("%d of them are cancelled records", cancelled); !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "--retry-failed runs them again") {
		t.Errorf("the resume does not say %q: %s", want, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, rundir.ParquetFile+".tmp")); err == nil {
		t.Error("the stale rollouts.parquet.tmp is still there")
	}
	if _, err := rundir.ReadManifest(dir); err != nil {
		t.Errorf("no manifest after --force: %v", err)
	}
	checkExactlyOnce(t, dir, 12, 1)
}

// A resource server that answers reward 1e200: each record is a verify failure naming the
// value, the run exits 0, and summary.json and evaluation.json are written (before, the summary
// was +Inf and every run and resume exited 1 without them).
func TestHugeRewardIsAVerifyFailure(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/verify" {
			io.WriteString(w, `{"reward":1e200}`)
			return
		}
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(srv.Close)
	m := newFakeModel(t, weatherModel)
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", weatherRows(t, 3, ""), "--out", dir,
		"--model-url", m.URL+"/v1", "--model", "m", "--server", srv.URL, "--quiet", "--retries", "0")
	if r.code != exitFailures { // every rollout failed
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	recs := readRecords(t, dir)
	for _, rec := range recs {
		if rec.FailureClass != record.FailVerify || rec.HasReward || !strings.Contains(rec.Error, "reward 1e+200 is outside the sane range") {
			t.Errorf("record %d: class %q reward %v error %q", rec.TaskIndex, rec.FailureClass, rec.HasReward, rec.Error)
		}
	}
	for _, name := range []string{rundir.SummaryFile, "evaluation.json"} {
		b := readFile(t, filepath.Join(dir, name))
		if strings.Contains(b, "Inf") || strings.Contains(b, "NaN") || !json.Valid([]byte(b)) {
			t.Errorf("%s: %s", name, b)
		}
	}
	if len(recs) != 3 {
		t.Errorf("%d records", len(recs))
	}
}

// A real redis-server behind the built-in server is killed and started again, empty, in the
// middle of a run: the rollouts whose sessions it lost are resource_server failures (the server
// answers their verify 409 session_not_found), never a reward; every reward is 1, as without
// the restart; and --resume --retry-failed runs the lost ones again to a reward each.
func TestRedisRestartLosesNoRollout(t *testing.T) {
	redis := redistest.StartServer(t)
	input := headLines(t, extractionData, 40)
	dir := t.TempDir()
	args := []string{"run", "--input", input, "--out", dir, "--model-url", "builtin:sim", "--server", "builtin:extraction",
		"--session-store", redis.URL, "--quiet", "--concurrency", "8", "--sim-latency", "20ms",
		"--fail-on-error", "0.5"} // the restart loses the sessions in flight: those rollouts fail
	restarted := make(chan error, 1)
	go func() {
		for strings.Count(readFileOr(filepath.Join(dir, rundir.JournalFile)), "\n") < 8 {
			time.Sleep(5 * time.Millisecond)
		}
		restarted <- redis.Restart()
	}()
	r := runCLI(t, context.Background(), nil, args...)
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lost := 0
	for _, rec := range readRecords(t, dir) {
		switch {
		case rec.HasReward && rec.Reward != 1:
			t.Errorf("task %d: reward %v after the restart (%s; tool errors %d)", rec.TaskIndex, rec.Reward, rec.Termination, rec.ToolErrors)
		case rec.FailureClass == record.FailResourceServer:
			lost++
			if !strings.Contains(rec.Error, "session_not_found") {
				t.Errorf("task %d: %s", rec.TaskIndex, rec.Error)
			}
		case !rec.HasReward && !rec.FailureClass.Infra():
			t.Errorf("task %d: %s %s", rec.TaskIndex, rec.FailureClass, rec.Error)
		}
	}
	if lost == 0 {
		t.Error("the restart lost no session: nothing was in flight?")
	}
	t.Logf("%d rollouts lost their session", lost)
	r = runCLI(t, context.Background(), nil, append(args, "--resume", "--retry-failed")...)
	if r.code != 0 {
		t.Fatalf("resume --retry-failed: exit %d: %s", r.code, r.stderr)
	}
	for _, rec := range checkExactlyOnce(t, dir, 40, 1) {
		if rec.Reward != 1 {
			t.Errorf("after --retry-failed, task %d: reward %v %s %s", rec.TaskIndex, rec.Reward, rec.FailureClass, rec.Error)
		}
	}
}

// An agent_ref.name that matches no named server, while a default one takes its rows, is
// warned about once per name (naming the file and line of a row with it); a name that matches
// is not.
func TestAgentRefWithoutServerWarnsOnce(t *testing.T) {
	var b strings.Builder
	for i, name := range []string{"weather", "wether", "wether", "other", "wether", "other", "weather"} {
		fmt.Fprintf(&b, `{"id": "w%d", "agent_ref": {"type": "responses_api_agents", "name": %q}, "responses_create_params": {"input": [{"role": "user", "content": "weather?"}], "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]}}`+"\n", i, name)
	}
	input := filepath.Join(t.TempDir(), "rows.jsonl")
	os.WriteFile(input, []byte(b.String()), 0o644)
	m := newFakeModel(t, weatherModel)
	r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", t.TempDir(), "--model-url", m.URL+"/v1", "--model", "m",
		"--server", "weather=builtin:example_single_tool_call", "--server", "builtin:example_single_tool_call", "--quiet", "--concurrency", "3")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for name, want := range map[string]int{`"wether"`: 1, `"other"`: 1, `"weather"`: 0} {
		if got := strings.Count(r.stderr, "warning: agent_ref.name "+name); got != want {
			t.Errorf("%d warnings for %s, want %d:\n%s", got, name, want, r.stderr)
		}
	}
	if !strings.Contains(r.stderr, `agent_ref.name "wether" (`+input+`:`) || !strings.Contains(r.stderr, `matches no named --server (weather): its rows go to the default server example_single_tool_call`) {
		t.Errorf("the warning does not name the row and the servers:\n%s", r.stderr)
	}
}

// A 403 whose body is plain text keeps the text in the record's error.
func TestModel403TextBodyKept(t *testing.T) {
	const text = "Forbidden: this key may not use model m (organization policy)"
	m := newFakeModel(t, func(w http.ResponseWriter, _ map[string]any, _ int64) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, text)
	})
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", weatherRows(t, 2, ""), "--out", dir, "--model-url", m.URL+"/v1", "--model", "m",
		"--server", "builtin:example_single_tool_call", "--quiet")
	if r.code != exitFailures { // every rollout failed
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, rec := range readRecords(t, dir) {
		if rec.FailureClass != record.FailModelError || !strings.Contains(rec.Error, "403") || !strings.Contains(rec.Error, text) {
			t.Errorf("record %d: %s %q", rec.TaskIndex, rec.FailureClass, rec.Error)
		}
	}
}

// --server values are stored with the credentials of their URLs redacted, names and builtin:
// servers as they are.
func TestRedactServers(t *testing.T) {
	got := redactServers([]string{"builtin:extraction", "a=builtin:counter", "http://u:pw-1234567@h:1/x?key=k-12345678", "b=http://h:2/?token=t-12345678&v=1", "http://h:3/"})
	want := []string{"builtin:extraction", "a=builtin:counter", "http://REDACTED@h:1/x?key=REDACTED", "b=http://h:2/?token=REDACTED&v=REDACTED", "http://h:3/"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%d: %q, want %q", i, got[i], want[i])
		}
	}
}
