package rundir

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/pkg/record"
)

// EvaluationFile is the run's evaluation (report.Evaluation as JSON), written by Finish.
const EvaluationFile = "evaluation.json"

// runFiles are the files a run writes in its directory.
var runFiles = []string{ManifestFile, JournalFile, TrajectoriesFile, ParquetFile, ParquetFile + ".tmp", SummaryFile, EvaluationFile, NemoGymFile, TrajIndexFile}

// PrepareOptions say how Prepare readies a run's directory.
type PrepareOptions struct {
	Input   string // the task file; "-" is stdin, which a manifest records without a hash
	Config  any    // the run's identity (what makes its results what they are), kept in the manifest
	NemoGym string // the NeMo Gym file the run also writes at the end ("" for none)
	Shard   *Shard // the shard of a sharded run the directory holds (nil: the whole run)
	// Resume finishes the run in the directory: its manifest must match (unless Force), and
	// Compact keeps one record per rollout (the ones with an infrastructure failure go with
	// RetryFailed, the transient ones alone with RetryTransient). Overwrite, for a new run,
	// removes an earlier run's files.
	Resume, Force, RetryFailed, RetryTransient, Overwrite bool
}

// Dir is a run's directory, locked and ready for the run's Sink.
type Dir struct {
	Path      string
	Done      *record.Done // the rollouts that have a record: a resume skips them
	Resumed   bool
	Cancelled int      // records kept (on a resume without RetryFailed) whose failure class is cancelled
	Changed   []string // the settings a resume changed (with --force, or --retry-failed of only failures)
	nemoGym   string
	unlock    func()
}

// Unlock releases the directory's lock; hold it until the run's last file is written.
func (d *Dir) Unlock() { d.unlock() }

// OpenSink opens the run's Sink, with its NeMo Gym lines when the run writes a NeMo Gym file.
func (d *Dir) OpenSink(secrets []string) (*Sink, error) {
	o := SinkOptions{Secrets: secrets}
	if d.nemoGym != "" {
		o.NemoGym = filepath.Join(d.Path, NemoGymFile)
	}
	return OpenSink(d.Path, o)
}

// Problem is why Prepare refused a directory or could not ready it.
type Problem int

const (
	OutputOverlaps      Problem = iota + 1 // an output would write over the input, another output or a run: Err (an *OverlapError)
	DirUnusable                            // Path could not be created or written: Err
	Locked                                 // another process holds the lock: Err (a *LockedError)
	InputUnreadable                        // the input could not be hashed: Err
	HoldsRun                               // a new run's directory Path holds an earlier run's file Other
	NemoGymExists                          // a new run's NeMo Gym file Path exists
	OverwriteFailed                        // an earlier run's file could not be removed: Err
	NothingToResume                        // Path has neither a manifest nor records
	NoManifest                             // Path has Records records but no manifest
	ManifestUnreadable                     // Err
	ManifestDiffers                        // the input or the config differs from the manifest's: Differences
	ResumeFailed                           // compacting the run's files failed: Err
	NemoGymOfAnotherRun                    // Path (the NeMo Gym file) is the one of the run in Other, of which the directory is a copy
)

// A PrepareError is a directory Prepare refused, or could not ready; the caller words it for
// its users (a command line names its flags).
type PrepareError struct {
	Problem     Problem
	Path, Other string
	Records     int
	Differences []string
	Err         error
}

func (e *PrepareError) Error() string {
	switch e.Problem {
	case HoldsRun:
		return fmt.Sprintf("%s already holds a run (%s)", e.Path, e.Other)
	case NoManifest:
		return fmt.Sprintf("%s has %d records in %s but no %s", e.Path, e.Records, JournalFile, ManifestFile)
	case ManifestDiffers:
		return strings.Join(e.Differences, "; ")
	case NothingToResume:
		return fmt.Sprintf("%s holds no run to resume", e.Path)
	case NemoGymExists:
		return fmt.Sprintf("%s already exists", e.Path)
	case NemoGymOfAnotherRun:
		return fmt.Sprintf("%s belongs to the run in %s, of which this directory is a copy", e.Path, e.Other)
	}
	if e.Path != "" {
		return fmt.Sprintf("%s: %v", e.Path, e.Err)
	}
	return e.Err.Error()
}

func (e *PrepareError) Unwrap() error { return e.Err }

// Prepare readies dir for a run: it takes the directory's lock (a second process writing it is
// refused, naming the first); for a new run it refuses an earlier run's files (unless
// Overwrite removes them) and writes the manifest; with Resume it checks the manifest against
// this run's and compacts the run's files. Outputs that would write over the input or over
// each other are refused first. Errors are *PrepareError.
func Prepare(dir string, o PrepareOptions) (d *Dir, err error) {
	nemoGym, err := checkPaths(dir, o)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, &PrepareError{Problem: DirUnusable, Path: dir, Err: err}
	}
	unlock, err := LockDir(dir)
	if err != nil {
		return nil, &PrepareError{Problem: Locked, Err: err}
	}
	defer func() {
		if err != nil {
			unlock()
		}
	}()
	d = &Dir{Path: dir, nemoGym: nemoGym, unlock: unlock}
	var mf *Manifest
	if o.Input == "-" {
		mf, err = NewManifest(os.DevNull, o.Config)
		if mf != nil {
			mf.Input, mf.InputSHA256 = "-", ""
		}
	} else {
		mf, err = NewManifest(o.Input, o.Config)
	}
	if err != nil {
		return nil, &PrepareError{Problem: InputUnreadable, Err: err}
	}
	mf.Dir = ResolvePath(dir)
	mf.JSONLOut = relativeTo(mf.Dir, nemoGym)
	mf.Shard = o.Shard
	// What a kill during the last writes leaves: never part of a run.
	os.Remove(filepath.Join(dir, ParquetFile+".tmp"))
	if nemoGym != "" {
		os.Remove(nemoGym + ".tmp")
	}
	if o.Resume {
		if err = d.resume(mf, o); err != nil {
			return nil, err
		}
		return d, nil
	}
	for _, name := range runFiles {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err != nil {
			continue
		}
		if !o.Overwrite {
			return nil, &PrepareError{Problem: HoldsRun, Path: dir, Other: name}
		}
		if err := os.Remove(path); err != nil {
			return nil, &PrepareError{Problem: OverwriteFailed, Err: err}
		}
	}
	if nemoGym != "" {
		if _, err := os.Stat(nemoGym); err == nil {
			if !o.Overwrite {
				return nil, &PrepareError{Problem: NemoGymExists, Path: o.NemoGym}
			}
			if err := os.Remove(nemoGym); err != nil {
				return nil, &PrepareError{Problem: OverwriteFailed, Err: err}
			}
		}
	}
	if err := WriteManifest(dir, mf); err != nil {
		return nil, &PrepareError{Problem: DirUnusable, Path: dir, Err: err}
	}
	d.Done = new(record.Done)
	return d, nil
}

// resume checks the manifest of the directory against this run's (mf) and compacts the run's
// files for a resume.
func (d *Dir) resume(mf *Manifest, o PrepareOptions) error {
	old, err := ReadManifest(d.Path)
	if errors.Is(err, os.ErrNotExist) {
		records := JournalLines(d.Path)
		if records == 0 {
			return &PrepareError{Problem: NothingToResume, Path: d.Path}
		}
		if !o.Force {
			return &PrepareError{Problem: NoManifest, Path: d.Path, Records: records}
		}
		old = mf // Force: this run's manifest stands for the lost one
	} else if err != nil {
		return &PrepareError{Problem: ManifestUnreadable, Err: err}
	}
	// A copy of a run (its manifest names another directory, which still holds a run) may
	// not write that run's --jsonl-out, and may name one of its own.
	if old.Dir != "" && old.Dir != mf.Dir && holdsRun(old.Dir) {
		if orig := old.JSONLOutPath(old.Dir); orig != "" && orig == d.nemoGym {
			return &PrepareError{Problem: NemoGymOfAnotherRun, Path: o.NemoGym, Other: old.Dir}
		}
		old.JSONLOut = mf.JSONLOut
	}
	// --jsonl-out is compared as a path: relative to this directory, or absolute.
	now, was := *mf, *old
	now.JSONLOut, was.JSONLOut = mf.JSONLOutPath(d.Path), old.JSONLOutPath(d.Path)
	diffs := now.Differences(&was)
	if len(diffs) > 0 && !o.Force {
		// Other settings are refused, unless the input is the same and --retry-failed runs
		// every record again: then no result of the old settings stays to be mixed with the new.
		redo := false
		if o.RetryFailed && mf.InputSHA256 == old.InputSHA256 {
			if redo, err = allRetried(d.Path); err != nil {
				return &PrepareError{Problem: ResumeFailed, Err: err}
			}
		}
		if !redo {
			return &PrepareError{Problem: ManifestDiffers, Path: d.Path, Differences: diffs}
		}
	}
	var keep func(*record.Record) bool // nil: every record stays, read for its key only
	switch {
	case o.RetryFailed:
		keep = func(r *record.Record) bool { return !r.FailureClass.Infra() }
	case o.RetryTransient:
		keep = func(r *record.Record) bool { return !r.FailureClass.Transient() }
	}
	var nemoGym string
	if d.nemoGym != "" {
		nemoGym = filepath.Join(d.Path, NemoGymFile)
	}
	if d.Done, err = Compact(d.Path, nemoGym, keep); err != nil {
		return &PrepareError{Problem: ResumeFailed, Err: err}
	}
	if !o.RetryFailed && !o.RetryTransient {
		if d.Cancelled, err = CountClass(d.Path, record.FailCancelled); err != nil {
			return &PrepareError{Problem: ResumeFailed, Err: err}
		}
	}
	old.JSONLOut, old.Dir = mf.JSONLOut, mf.Dir
	old.Shard = mf.Shard
	old.Complete = nil // until this resume ends with every rollout recorded
	if len(diffs) > 0 {
		d.Changed = diffs
		// The manifest names what runs from now on (a later --resume takes its settings); the
		// resume says what changed.
		old.Input, old.InputSHA256, old.Config, old.ConfigSHA256 = mf.Input, mf.InputSHA256, mf.Config, mf.ConfigSHA256
	}
	old.Resumes = append(old.Resumes, Resume{At: time.Now().UTC(), Forced: len(diffs) > 0 && o.Force, RetryFailed: o.RetryFailed, RetryTransient: o.RetryTransient, Changed: diffs})
	if err := WriteManifest(d.Path, old); err != nil {
		return err
	}
	d.Resumed = true
	return nil
}

// allRetried reports whether --retry-failed runs every record of dir's journal again: each
// is an infrastructure failure (none is a reward or a bad_task).
func allRetried(dir string) (bool, error) {
	all := true
	err := ScanJournal(join(dir, JournalFile), func(r *record.Record) error {
		all = all && r.FailureClass.Infra()
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return all, err
}

// JournalLines is the number of lines of the journal in dir (0 if it cannot be read).
func JournalLines(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, JournalFile))
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte{'\n'})
}

// checkPaths refuses outputs that would write over the input or over each other, by the rule
// of CheckOutput: dir may not be or contain the input; the NeMo Gym file may not be the
// input, dir, a file of dir's run or of another run. It returns the NeMo Gym file's absolute
// path ("" without it).
func checkPaths(dir string, o PrepareOptions) (nemoGym string, err error) {
	var input []Read
	if o.Input != "-" {
		input = []Read{{Path: o.Input, What: "the input"}}
	}
	if err := CheckOutput(Output{Flag: "--out", Path: dir, Dir: true}, input...); err != nil {
		return "", &PrepareError{Problem: OutputOverlaps, Path: dir, Err: err}
	}
	if o.NemoGym == "" {
		return "", nil
	}
	if err := CheckOutput(Output{Flag: "--jsonl-out", Path: o.NemoGym, Own: dir}, input...); err != nil {
		return "", &PrepareError{Problem: OutputOverlaps, Path: o.NemoGym, Err: err}
	}
	return ResolvePath(o.NemoGym), nil
}

// ResolvePath is path made absolute with its symbolic links resolved, as far as it exists
// (the part that does not exist yet is joined as it is): the NeMo Gym file's path in the
// manifest.
func ResolvePath(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r
	}
	dir, base := filepath.Split(abs)
	if dir == abs || base == "" {
		return abs
	}
	return filepath.Join(ResolvePath(filepath.Clean(dir)), base)
}

// within reports whether path is inside dir (both resolved).
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
