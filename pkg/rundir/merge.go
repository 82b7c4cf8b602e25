package rundir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rollout-dev/rollout/internal/lines"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
)

// MergeOptions say how Merge writes the merged run.
type MergeOptions struct {
	Stats   report.StatsOptions // how the evaluation is computed
	NemoGym string              // the NeMo Gym file to write from the shards' lines ("" for none)
	// Overwrite replaces a run already in the output directory.
	Overwrite bool
}

// Merge writes the run r (its shards) into the directory out as one run: the shards'
// journals, trajectories and NeMo Gym lines one after the other, in shard order, each
// shard's records checked (Run.Scan), then, as a run's end does (Finish), rollouts.parquet,
// summary.json and evaluation.json derived from the merged journal, so that they are what
// one process running the whole job writes. The manifest is the shards' identity, with the
// directories merged and the shards missing; it is marked complete when no shard is missing
// or incomplete. out and the NeMo Gym file may not overlap what the merge reads (CheckOutput),
// out may not hold a run nor the NeMo Gym file exist unless Overwrite: those errors are an
// *OverlapError or a *PrepareError (HoldsRun, NemoGymExists).
func Merge(out string, r *Run, o MergeOptions) (fin Finished, err error) {
	reads := ReadsOf(r.Dirs...)
	if err := CheckOutput(Output{Flag: "--out", Path: out, Dir: true}, reads...); err != nil {
		return fin, err
	}
	if o.NemoGym != "" {
		if err := CheckOutput(Output{Flag: "--jsonl-out", Path: o.NemoGym, Own: out}, reads...); err != nil {
			return fin, err
		}
		if _, err := os.Stat(o.NemoGym); err == nil && !o.Overwrite {
			return fin, &PrepareError{Problem: NemoGymExists, Path: o.NemoGym}
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fin, err
	}
	unlock, err := LockDir(out)
	if err != nil {
		return fin, err
	}
	defer unlock()
	for _, name := range runFiles {
		path := join(out, name)
		if _, err := os.Stat(path); err != nil {
			continue
		}
		if !o.Overwrite {
			return fin, &PrepareError{Problem: HoldsRun, Path: out, Other: name}
		}
		if err := os.Remove(path); err != nil {
			return fin, err
		}
	}
	files := map[string]*mergedFile{}
	// A merge that fails leaves no half-merged run behind: the next one needs no --overwrite.
	defer func() {
		if err != nil {
			for _, name := range runFiles {
				os.Remove(join(out, name))
			}
		}
	}()
	for _, name := range []string{JournalFile, TrajectoriesFile, NemoGymFile} {
		f, err := openJSONL(join(out, name))
		if err != nil {
			return fin, err
		}
		defer f.Close()
		files[name] = &mergedFile{jsonlFile: f}
	}
	var problems []string
	extra := 0
	problem := func(p string) {
		if len(problems) < maxNamed {
			problems = append(problems, p)
		} else {
			extra++
		}
	}
	var intern record.Decoder
	r.Short = nil
	for i, dir := range r.Dirs {
		journal := files[JournalFile]
		done, err := r.scanDir(i, func(line []byte, _ *record.Record) error { return journal.writeLine(line) }, problem)
		if err != nil {
			return fin, err
		}
		// A side line is kept when it is the first of a record kept: an unfinished shard may
		// have lines of rollouts that had no record yet.
		trajectories := 0
		for _, side := range []struct{ name, task, rollout, arm string }{
			{TrajectoriesFile, "task_index", "rollout_index", "arm"},
			{NemoGymFile, ngTaskIndexKey, ngRolloutIndexKey, ngArmKey},
		} {
			seen := record.NewDone(r.Index[i], r.Shards)
			dst := files[side.name]
			err := scanSideLines(&intern, join(dir, side.name), side.task, side.rollout, side.arm, func(key record.Key, ok bool, write func(io.Writer) error) error {
				if !ok || !done.Has(key) || !seen.Add(key) {
					return nil
				}
				return dst.writeFrom(write)
			})
			if err != nil {
				return fin, err
			}
			if side.name == TrajectoriesFile {
				trajectories = seen.Len()
			}
		}
		r.checkCount(i, done, trajectories, problem)
	}
	if err := runProblems(problems, extra); err != nil {
		return fin, err
	}
	for name, f := range files {
		if err := f.Close(); err != nil {
			return fin, err
		}
		if f.lines == 0 && name != JournalFile {
			os.Remove(f.path) // no side lines: as a run without them
		}
	}
	mf := *r.Manifest
	mf.MergedFrom, mf.Missing, mf.Short, mf.CreatedAt = r.Dirs, r.Missing, r.Short, time.Now().UTC()
	mf.Dir = ResolvePath(out)
	if o.NemoGym != "" {
		mf.JSONLOut = relativeTo(mf.Dir, ResolvePath(o.NemoGym))
	}
	if err := WriteManifest(out, &mf); err != nil {
		return fin, err
	}
	return Finish(out, FinishOptions{Stats: o.Stats, NemoGym: o.NemoGym, Complete: len(r.Missing) == 0 && len(r.Incomplete) == 0 && len(r.Short) == 0})
}

// mergedFile is a file of the merged run, written a line at a time, counting its lines.
type mergedFile struct {
	*jsonlFile
	lines int
}

// writeLine writes line (without its newline) and a newline.
func (m *mergedFile) writeLine(line []byte) error {
	m.lines++
	if err := m.jsonlFile.writeLine(line); err != nil {
		return err
	}
	return m.jsonlFile.writeLine(newline)
}

var newline = []byte{'\n'}

// writeFrom writes a line (without its newline) with write, then the newline.
func (m *mergedFile) writeFrom(write func(io.Writer) error) error {
	m.lines++
	if err := write(m.jsonlFile.w); err != nil {
		return err
	}
	return m.jsonlFile.writeLine(newline)
}

// sideLineHead is how much of a line of a side file (trajectories.jsonl, nemo_gym.jsonl) a
// merge or a resume's compaction holds: a longer line's key is decoded as it streams from the
// file, and its bytes are copied from the file.
var sideLineHead = lines.BlockSize

// scanSideLines calls fn with the key (task, rollout, arm members) of each complete line of
// the file at path (none when it does not exist; ok false when a line has no such key) and a
// write that copies the line, without its newline, to a writer: a line longer than
// sideLineHead is never held whole.
func scanSideLines(intern *record.Decoder, path, task, rollout, arm string, fn func(key record.Key, ok bool, write func(io.Writer) error) error) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	var at int64
	_, err = lines.ScanHeads(f, 1, sideLineHead, func(int, []byte, *struct{}) {}, func(head []byte, length int64, _ int, _ *struct{}) error {
		off := at
		at += length + 1
		if length == int64(len(head)) {
			key, ok := lineKey(intern, head, task, rollout, arm)
			return fn(key, ok, func(w io.Writer) error { _, err := w.Write(head); return err })
		}
		key, ok := decodeSideKeyAt(path, off, task, rollout, arm)
		return fn(key, ok, func(w io.Writer) error {
			_, err := io.Copy(w, io.NewSectionReader(f, off, length))
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
