package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/rundir"
	"github.com/rollout-dev/rollout/pkg/view"
)

// journalRecords counts the records in a run's journal.
func journalRecords(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	if err := rundir.ScanJournal(filepath.Join(dir, rundir.JournalFile), func(*record.Record) error { n++; return nil }); err != nil {
		return 0
	}
	return n
}

// A run that does not have every rollout it planned says so everywhere: while it runs (report,
// view, which follows it), and after Ctrl-C (the run's summary, report, view, export, the
// leaderboard); a resume that finishes it says nothing more.
func TestIncompleteRunsSaySo(t *testing.T) {
	release := make(chan struct{})
	m := newFakeModel(t, func(w http.ResponseWriter, req map[string]any, n int64) {
		if n > 5 { // the first 5 rollouts end at once, the others wait
			select {
			case <-release:
			case <-time.After(time.Minute):
			}
		}
		writeChat(w, "done")
	})
	input := weatherRows(t, 40, "")
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- runCLI(t, ctx, nil, "run", "--input", input, "--out", dir, "--model-url", m.URL+"/v1", "--model", "m",
			"--server", "builtin:example_single_tool_call", "--concurrency", "4", "--drain-timeout", "30s", "--quiet")
	}()
	deadline := time.Now().Add(time.Minute)
	for journalRecords(t, dir) < 5 || m.calls.Load() < 9 {
		if time.Now().After(deadline) {
			t.Fatalf("the run did not get going: %d records, %d calls", journalRecords(t, dir), m.calls.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Running: report reads the journal and says the run is running.
	r := runCLI(t, context.Background(), nil, "report", dir)
	if r.code != 0 || !strings.HasPrefix(r.stdout, dir+": running: 5 of 40 rollouts so far (a run is writing it)\n") {
		t.Errorf("report of a running run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// view: the overview says so and reloads itself.
	d, err := view.Load([]string{dir}, view.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := view.NewFollow([]string{dir}, view.Options{}, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	get := func() string {
		rec := httptest.NewRecorder()
		f.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		b, _ := io.ReadAll(rec.Result().Body)
		return string(b)
	}
	page := get()
	if !strings.Contains(page, "<b>running: 5 of 40 rollouts so far</b>") || !strings.Contains(page, `<meta http-equiv="refresh" content="5">`) {
		t.Errorf("overview of a running run: no status or no refresh:\n%s", page)
	}

	// Ctrl-C: the 4 running rollouts are drained and written.
	cancel()
	time.Sleep(100 * time.Millisecond)
	close(release)
	res := <-done
	if res.code != exitInterrupted {
		t.Fatalf("run: exit %d, want %d: %s", res.code, exitInterrupted, res.stderr)
	}
	n := journalRecords(t, dir)
	if n < 9 || n >= 40 {
		t.Fatalf("%d records after the interrupt", n)
	}
	status := fmt.Sprintf("incomplete: %d of 40 rollouts", n)
	if !strings.HasPrefix(res.stdout, "status           "+status+"\n") {
		t.Errorf("the run's summary does not start with its status %q:\n%s", status, res.stdout)
	}
	// view follows: the run has ended, so the next request reads it again.
	var again string
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if again = get(); strings.Contains(again, "<b>"+status+"</b>") {
			break
		}
	}
	if !strings.Contains(again, "<b>"+status+"</b>") || strings.Contains(again, "http-equiv=\"refresh\"") || !strings.Contains(again, "rollout run --resume finishes the run") {
		t.Errorf("the overview did not follow the run to its end (%s):\n%s", status, again)
	}
	r = runCLI(t, context.Background(), nil, "report", dir)
	if r.code != 0 || !strings.HasPrefix(r.stdout, dir+": "+status+" (the run did not finish: rollout run --resume finishes it)\n") {
		t.Errorf("report of an interrupted run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, context.Background(), nil, "report", dir, "--format", "json")
	if r.code != 0 || !strings.Contains(r.stderr, "rollout: warning: "+dir+": "+status) || !json.Valid([]byte(r.stdout)) {
		t.Errorf("report --format json of an interrupted run: exit %d, stderr %s", r.code, r.stderr)
	}
	out := filepath.Join(t.TempDir(), "rl.jsonl")
	r = runCLI(t, context.Background(), nil, "export", dir, "--format", "rl", "-o", out)
	if r.code != 0 || !strings.Contains(r.stderr, "rollout: warning: export: "+dir+" is "+status+"; the run did not finish") {
		t.Errorf("export of an interrupted run: exit %d, stderr %s", r.code, r.stderr)
	}
	lb := runCLI(t, context.Background(), nil, "report", dir, dir, "--format", "json")
	var board report.Leaderboard
	if err := json.Unmarshal([]byte(lb.stdout), &board); err != nil || len(board.Rows) != 2 || board.Rows[1].Status != status {
		t.Errorf("leaderboard of an interrupted run: %v %+v", err, board.Rows)
	}

	// The resume finishes the run: no status anywhere.
	res = runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--model-url", m.URL+"/v1", "--model", "m",
		"--server", "builtin:example_single_tool_call", "--resume", "--quiet")
	if res.code != 0 || strings.Contains(res.stdout, "status") {
		t.Fatalf("resume: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	r = runCLI(t, context.Background(), nil, "report", dir)
	if r.code != 0 || regexp.MustCompile(`incomplete|running`).MatchString(r.stdout+r.stderr) {
		t.Errorf("report of the finished run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if d, err := view.Load([]string{dir}, view.Options{}); err != nil || d.Runs[0].Status != "" {
		t.Errorf("view of the finished run: %v, status %q", err, d.Runs[0].Status)
	}
}
