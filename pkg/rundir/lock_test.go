package rundir

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLockDirHolder is not a test: run as a child process by TestLockDir, it takes the lock
// of ROLLOUT_LOCK_DIR, says so on stdout, and holds it until killed or until stdin closes.
func TestLockDirHolder(t *testing.T) {
	dir := os.Getenv("ROLLOUT_LOCK_DIR")
	if dir == "" {
		t.Skip("the child process of TestLockDir")
	}
	if _, err := LockDir(dir); err != nil {
		os.Stdout.WriteString("error: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString("locked\n")
	bufio.NewReader(os.Stdin).ReadString('\n')
	os.Exit(0)
}

// startHolder starts a process that holds dir's lock.
func startHolder(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockDirHolder$")
	cmd.Env = append(os.Environ(), "ROLLOUT_LOCK_DIR="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "locked\n" {
		t.Fatalf("holder: %q", line)
	}
	return cmd
}

// One process at a time holds an output directory: a second one (another process, or a second
// lock in this one) is refused with the holder's pid; the lock goes when the holder unlocks, and
// when it is killed with SIGKILL (the kernel releases it: no stale lock).
func TestLockDir(t *testing.T) {
	dir := t.TempDir()
	holder := startHolder(t, dir)

	_, err := LockDir(dir)
	var locked *LockedError
	if !errors.As(err, &locked) || locked.PID != holder.Process.Pid {
		t.Fatalf("LockDir while process %d holds it: %v", holder.Process.Pid, err)
	}
	for _, want := range []string{dir, "process " + itoa(int64(holder.Process.Pid)), "choose another --out"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}

	holder.Process.Kill() // SIGKILL: nothing of the holder runs
	holder.Wait()
	unlock, err := LockDir(dir)
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	if pid := lockHolder(filepath.Join(dir, LockFile)); pid != os.Getpid() {
		t.Errorf("the lock file says pid %d, want %d", pid, os.Getpid())
	}
	if _, err := LockDir(dir); !errors.As(err, &locked) || locked.PID != os.Getpid() {
		t.Errorf("a second lock in the same process: %v", err)
	}
	unlock()
	unlock2, err := LockDir(dir)
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	unlock2()

	if _, err := LockDir(filepath.Join(dir, "missing")); err == nil || errors.As(err, &locked) {
		t.Errorf("a directory that does not exist: %v", err)
	}
}
