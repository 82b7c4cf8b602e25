package rundir

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// LockFile is the lock file of an output directory: a process that writes the directory holds
// an exclusive flock on it, and the file holds that process's pid.
const LockFile = ".lock"

// LockedError is the refusal of LockDir: another process holds the directory.
type LockedError struct {
	Dir string
	PID int // the holder's pid, 0 if it could not be read
}

func (e *LockedError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("%s is in use by %s (it holds %s): two runs must not write one output directory; wait for it to end, or choose another --out",
		e.Dir, holder, join(e.Dir, LockFile))
}

// LockDir takes an exclusive advisory lock (flock) on dir's lock file, without waiting, and
// writes this process's pid into it. The lock lasts until unlock is called or the process
// ends, however it ends: the kernel releases it, so a kill -9 never leaves a stale lock. When
// another process holds it, the error is a *LockedError naming that process's pid.
func LockDir(dir string) (unlock func(), err error) {
	path := join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &LockedError{Dir: dir, PID: lockHolder(path)}
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt(pid, 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// lockHolder reads the pid in a lock file; 0 if there is none (yet).
func lockHolder(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}
