package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rollout-dev/rollout/pkg/rundir"
)

// manifestModel is the model dir's manifest names, and what its last resume changed.
func manifestModel(t *testing.T, dir string) (model string, changed []string) {
	t.Helper()
	mf, err := rundir.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Model string `json:"model"`
	}
	if err := json.Unmarshal(mf.Config, &cfg); err != nil {
		t.Fatal(err)
	}
	if n := len(mf.Resumes); n > 0 {
		changed = mf.Resumes[n-1].Changed
	}
	return cfg.Model, changed
}

// modelByName answers as weatherModel for the model "right" and 404 "model not found" for
// any other; while dead holds (when not nil) it answers 500 to everything.
func modelByName(dead func(n int64) bool) func(w http.ResponseWriter, req map[string]any, n int64) {
	return func(w http.ResponseWriter, req map[string]any, n int64) {
		if dead != nil && dead(n) {
			http.Error(w, `{"error": {"message": "engine died", "type": "server_error"}}`, 500)
			return
		}
		if req["model"] != "right" {
			http.Error(w, fmt.Sprintf(`{"error": {"message": "The model %v does not exist.", "type": "NotFoundError", "code": 404}}`, req["model"]), 404)
			return
		}
		weatherModel(w, req, n)
	}
}

// A model that dies mid-run: exit 5 (its 500s are transient), and the error says how to run the
// failed rollouts again;
// that command, once the model is back, finishes the run.
func TestModelDiesMidRunHint(t *testing.T) {
	var revived atomic.Bool
	m := newFakeModel(t, modelByName(func(n int64) bool { return n > 6 && !revived.Load() })) // 3 rollouts of 2 calls, then 500s
	dir := t.TempDir()
	input := weatherRows(t, 10, "")
	r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--model-url", m.URL+"/v1", "--model", "right",
		"--server", "builtin:example_single_tool_call", "--concurrency", "1", "--retries", "0", "--quiet")
	if r.code != exitTransient {
		t.Fatalf("exit %d, want %d\n%s", r.code, exitTransient, r.stderr)
	}
	hint := "Fix the cause, then run the 7 failed rollouts again (the others are kept): rollout run --resume --retry-failed --out " + dir
	if !strings.Contains(r.stderr, hint) {
		t.Fatalf("stderr lacks %q:\n%s", hint, r.stderr)
	}
	revived.Store(true)
	r = runCLI(t, context.Background(), nil, "run", "--resume", "--retry-failed", "--out", dir, "--quiet")
	if r.code != 0 {
		t.Fatalf("the hinted resume: exit %d\n%s", r.code, r.stderr)
	}
	for _, rec := range readRecords(t, dir) {
		if !rec.HasReward || rec.Reward != 1 {
			t.Errorf("task %d: %+v", rec.TaskIndex, rec)
		}
	}
}

// The early stop's hint works when the fix is another --model: every rollout so far failed,
// so --resume --retry-failed takes the new model without --force, and the manifest names it.
// With records that have rewards, another model needs --force, and the manifest names the new
// model too (a later plain --resume uses it), with the change in the resume's history.
func TestEarlyStopHintWithAnotherModel(t *testing.T) {
	m := newFakeModel(t, modelByName(nil))
	dir := t.TempDir()
	input := weatherRows(t, 6, "")
	base := []string{"--out", dir, "--model-url", m.URL + "/v1", "--server", "builtin:example_single_tool_call", "--quiet"}
	r := runCLI(t, context.Background(), nil, append([]string{"run", "--input", input, "--model", "wrong", "--concurrency", "1", "--early-stop", "3"}, base...)...)
	if r.code != exitFailures || !strings.Contains(r.stderr, "stopped early") {
		t.Fatalf("exit %d, want an early stop\n%s", r.code, r.stderr)
	}
	hint := "rollout run --resume --retry-failed --out " + dir
	if !strings.Contains(r.stderr, hint) {
		t.Fatalf("no hint %q:\n%s", hint, r.stderr)
	}
	r = runCLI(t, context.Background(), nil, append([]string{"run", "--resume", "--retry-failed", "--model", "right"}, base...)...)
	if r.code != 0 {
		t.Fatalf("the hinted resume with --model right: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, `from now on with other settings (the manifest names them): --model was wrong, now right`) {
		t.Errorf("the resume does not say what changed:\n%s", r.stderr)
	}
	recs := readRecords(t, dir)
	if len(recs) != 6 {
		t.Fatalf("%d records, want 6", len(recs))
	}
	for _, rec := range recs {
		if !rec.HasReward || rec.Model != "right" {
			t.Errorf("task %d: model %q, reward %v (%s)", rec.TaskIndex, rec.Model, rec.HasReward, rec.Error)
		}
	}
	if model, changed := manifestModel(t, dir); model != "right" || len(changed) != 1 {
		t.Errorf("manifest names model %q, changes %q; want right, 1 change", model, changed)
	}

	// Now the run has rewards: another model is refused without --force ...
	r = runCLI(t, context.Background(), nil, append([]string{"run", "--resume", "--retry-failed", "--model", "other"}, base...)...)
	if r.code != exitUsage || !strings.Contains(r.stderr, `--model was right, now other; pass --force`) {
		t.Fatalf("another model over rewarded records: exit %d\n%s", r.code, r.stderr)
	}
	// ... and with --force the manifest names it from then on.
	r = runCLI(t, context.Background(), nil, append([]string{"run", "--resume", "--force", "--model", "other"}, base...)...)
	if r.code != 0 {
		t.Fatalf("--force: exit %d\n%s", r.code, r.stderr)
	}
	if model, changed := manifestModel(t, dir); model != "other" || len(changed) != 1 || !strings.Contains(changed[0], `"other"`) {
		t.Errorf("after --force the manifest names model %q (changes %q), want other", model, changed)
	}
	mf, _ := os.ReadFile(filepath.Join(dir, rundir.ManifestFile))
	if !strings.Contains(string(mf), `"forced": true`) {
		t.Errorf("the forced resume is not marked:\n%s", mf)
	}
	// A plain resume takes the manifest's model and is not refused.
	if r = runCLI(t, context.Background(), nil, "run", "--resume", "--out", dir, "--model-url", m.URL+"/v1", "--quiet"); r.code != 0 {
		t.Fatalf("plain resume after --force: exit %d\n%s", r.code, r.stderr)
	}
}

// validate refuses a file with no task (empty, or only blank lines), as run does.
func TestValidateEmptyFile(t *testing.T) {
	for name, content := range map[string]string{"empty": "", "blank": "\n  \n\n"} {
		path := filepath.Join(t.TempDir(), name+".jsonl")
		os.WriteFile(path, []byte(content), 0o644)
		r := runCLI(t, context.Background(), nil, "validate", path)
		if r.code != exitChecks || !strings.Contains(r.stdout, path+":1: no tasks: the file is empty or holds only blank lines") {
			t.Errorf("%s: exit %d\nstdout %s\nstderr %s", name, r.code, r.stdout, r.stderr)
		}
	}
}
