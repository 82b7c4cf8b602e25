package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/pkg/rundir"
)

// lockedBuffer is a process's stderr, readable while the process writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A run started in the background of a shell (cmd &: SIGINT ignored when it starts) drains on
// the first SIGINT and exits on the second, with exit code 130, though its rollouts would take
// an hour to drain.
func TestSecondInterruptExitsInBackground(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and signals the binary")
	}
	bin := buildRollout(t)
	dir := t.TempDir()
	// trap "" INT: the shell's way of starting a background job; exec keeps the process (and
	// the ignored SIGINT) for rollout.
	cmd := exec.Command("sh", "-c", `trap "" INT; exec "$0" "$@"`, bin, "run", "--input", headLines(t, extractionData, 4),
		"--out", dir, "--model-url", "builtin:sim", "--server", "builtin:extraction", "--quiet",
		"--sim-latency", "1h", "--model-timeout", "0", "--rollout-timeout", "0", "--drain-timeout", "1h")
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	defer cmd.Process.Kill()
	// The rollouts are running once the journal is open.
	waitFor(t, "the journal", func() bool {
		_, err := os.Stat(filepath.Join(dir, rundir.JournalFile))
		return err == nil
	})
	cmd.Process.Signal(os.Interrupt)
	waitFor(t, "the interrupt notice", func() bool { return strings.Contains(stderr.String(), "Ctrl-C again exits at once") })
	cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-waited:
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != exitInterrupted {
			t.Errorf("exit %v, want code %d\n%s", err, exitInterrupted, stderr.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the second SIGINT did not end the background run\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "interrupted again: exiting now; rollout run --resume finishes the run") {
		t.Errorf("no notice of the second interrupt:\n%s", stderr.String())
	}
}
