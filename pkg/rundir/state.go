package rundir

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// State is how far a run directory's run got, from its manifest and lock: the rollouts it
// planned, those with a record, whether it finished, and whether a process writes it now.
type State struct {
	// Known is set when the directory has a manifest (a file or a directory without one
	// has no state to tell).
	Known    bool `json:"-"`
	Planned  int  `json:"planned,omitempty"` // 0: not known
	Done     int  `json:"done"`
	Complete bool `json:"complete"`
	// Live is set when a process holds the directory's lock: the run is being written.
	Live bool `json:"live,omitempty"`
}

// ReadState reads the state of the run in dir, of which done rollouts have a record.
func ReadState(dir string, done int) (State, error) {
	mf, err := ReadManifest(dir)
	if errors.Is(err, os.ErrNotExist) {
		return State{Done: done, Complete: true}, nil
	}
	if err != nil {
		return State{}, err
	}
	return State{Known: true, Planned: mf.Planned, Done: done, Complete: mf.Complete != nil, Live: Live(dir)}, nil
}

// Incomplete says the run does not have every rollout it planned: it is running, or it
// was interrupted, stopped early or crashed.
func (s State) Incomplete() bool { return s.Known && (!s.Complete || s.Live) }

// String is "" for a finished run, else what it is: "incomplete: 171 of 480 rollouts",
// "running: 12 of 480 rollouts so far".
func (s State) String() string {
	if !s.Incomplete() {
		return ""
	}
	what, of := "incomplete", ""
	if s.Live {
		what = "running"
	}
	if s.Planned > 0 {
		of = fmt.Sprintf(" of %d", s.Planned)
	}
	str := fmt.Sprintf("%s: %d%s rollouts", what, s.Done, of)
	if s.Live {
		str += " so far"
	}
	return str
}

// SetPlanned records in dir's manifest the rollouts the run plans in all (n < 0: not known,
// nothing is written).
func SetPlanned(dir string, n int) error {
	if n < 0 {
		return nil
	}
	mf, err := ReadManifest(dir)
	if err != nil {
		return err
	}
	mf.Planned = n
	return WriteManifest(dir, mf)
}

// Live says whether a process holds dir's lock (LockDir): a run is writing the directory. It
// tries a shared lock without waiting and lets it go at once.
func Live(dir string) bool {
	f, err := os.Open(join(dir, LockFile))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}
