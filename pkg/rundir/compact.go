package rundir

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/rollout-dev/rollout/internal/durable"
	"github.com/rollout-dev/rollout/internal/jsonfast"
	"github.com/rollout-dev/rollout/internal/lines"
	"github.com/rollout-dev/rollout/pkg/record"
)

// Compact prepares the output directory for a resume. It rewrites the journal keeping the
// first record of each rollout for which keep is true (nil keeps all), dropping a torn last
// line; then it rewrites the trajectories file (and the NeMo Gym file at nemoGym, if set)
// keeping one line for each kept record, so that lines of rollouts that had no record when
// the run stopped are gone. It returns the kept rollouts: the ones a resume skips.
//
// A file is only rewritten when a line must go before other lines that stay; lines to drop
// at its end (and a torn last line) are cut off, and a file that keeps every line is left
// as it is; either way it is synced. Without keep, journal lines are read for their key
// only, by a fast path that falls back to encoding/json when unsure; with keep, every
// record is decoded (each call gets a record of its own).
func Compact(dir, nemoGym string, keep func(*record.Record) bool) (*record.Done, error) {
	done := record.NewDone(0, 0)
	jpath := join(dir, JournalFile)
	if _, err := os.Stat(jpath); errors.Is(err, os.ErrNotExist) {
		return done, nil
	}
	workers := lines.Workers()
	decoders := make([]record.Decoder, workers)
	type journalLine struct {
		key record.Key
		rec *record.Record // with keep, or when the fast path could not read the key
		err error
	}
	err := rewriteLines(jpath, workers, 0, func(w int, line []byte, res *journalLine) {
		d := &decoders[w]
		if keep == nil {
			var ok bool
			if res.key, ok = d.Key(line); ok {
				return
			}
		}
		rec := new(record.Record)
		res.err = d.DecodeRecord(line, rec)
		res.rec, res.key = rec, rec.Key()
	}, func(_ []byte, _, _ int64, n int, res *journalLine) (bool, error) {
		if res.err != nil {
			return false, &record.LineError{Path: jpath, Line: n, Err: res.err}
		}
		if keep == nil {
			if !done.Add(res.key) {
				return false, nil
			}
		} else {
			if done.Has(res.key) || !keep(res.rec) {
				return false, nil
			}
			done.Add(res.key)
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	// A trajectory line is kept if it is the first of a kept record.
	type keyLine struct {
		task, rollout int64
		arm           []byte // in the line
		ok            bool
	}
	var intern record.Decoder
	seen := record.NewDone(0, 0)
	tpath := join(dir, TrajectoriesFile)
	err = rewriteLines(tpath, workers, sideLineHead, func(_ int, line []byte, res *keyLine) {
		res.task, res.rollout, res.arm, _, res.ok = jsonfast.LineKeys(line, "task_index", "rollout_index", "arm")
	}, func(line []byte, length, at int64, _ int, res *keyLine) (bool, error) {
		var key record.Key
		if length <= int64(len(line)) && res.ok {
			key = record.Key{Task: res.task, Rollout: res.rollout, Arm: intern.Intern(res.arm)}
		} else {
			k, err := decodeTrajKey(tpath, line, length, at)
			if err != nil {
				return false, nil
			}
			key = record.Key{Task: k.Task, Rollout: k.Rollout, Arm: intern.Intern([]byte(k.Arm))}
		}
		return done.Has(key) && seen.Add(key), nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if nemoGym != "" {
		if err := keepNemoGymLines(nemoGym, workers, done); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	return done, nil
}

// keepNemoGymLines rewrites the NeMo Gym lines file at path (written by a NemoGymWriter)
// keeping the first line of each rollout in done, keyed by task, rollout and arm; lines without
// the three keys are not the run's, and go.
func keepNemoGymLines(path string, workers int, done *record.Done) error {
	var intern record.Decoder
	seen := record.NewDone(0, 0)
	return rewriteLines(path, workers, sideLineHead, func(int, []byte, *struct{}) {}, func(line []byte, length, at int64, _ int, _ *struct{}) (bool, error) {
		var key record.Key
		var ok bool
		if length > int64(len(line)) {
			key, ok = decodeSideKeyAt(path, at, ngTaskIndexKey, ngRolloutIndexKey, ngArmKey)
		} else {
			key, ok = lineKey(&intern, line, ngTaskIndexKey, ngRolloutIndexKey, ngArmKey)
		}
		if !ok {
			return false, nil
		}
		return done.Has(key) && seen.Add(key), nil
	})
}

// rewriteLines makes the file at path hold its complete lines for which keep is true, in
// order (a torn last line is dropped), and syncs it. parse runs on workers goroutines, ahead
// of keep, which gets what it made of each line, with the line's whole length (without its
// newline) and where it starts in the file. With head 0, every line is held whole; with head
// above 0, parse and keep get at most the first head bytes of a line (lines.ScanHeads), and a
// longer line that is kept is copied from the file by its offset, never held whole.
// The file is rewritten (through a temporary file that is synced and renamed) only if a line
// to keep follows one to drop: the lines before the first dropped one are copied by the
// kernel, the others written. Otherwise the lines to drop, if any, are at the end, and the
// file is cut short.
func rewriteLines[T any](path string, workers, head int, parse func(w int, line []byte, res *T), keep func(line []byte, length, at int64, n int, res *T) (bool, error)) (err error) {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	tmp := path + ".compact"
	var (
		out    *os.File
		bw     *bufio.Writer
		off    int64      // where the line given to keep starts
		dropAt int64 = -1 // where the dropped lines start, while no kept line follows them
	)
	defer func() {
		if err != nil && out != nil {
			out.Close()
			os.Remove(tmp)
		}
	}()
	var keepErr error // keep's: returned as it is
	// write puts a kept line, with its newline, on bw: from the block it is in (where its
	// newline follows it), or, for a line longer than its head, from the file.
	write := func(line []byte, length, start int64) error {
		if length == int64(len(line)) {
			_, err := bw.Write(line[:len(line)+1])
			return err
		}
		if _, err := io.Copy(bw, io.NewSectionReader(in, start, length)); err != nil {
			return err
		}
		return bw.WriteByte('\n')
	}
	consume := func(line []byte, length int64, n int, res *T) error {
		start := off
		off += length + 1
		ok, err := keep(line, length, start, n, res)
		if err != nil {
			keepErr = err
			return err
		}
		switch {
		case !ok:
			if out == nil && dropAt < 0 {
				dropAt = start
			}
		case out != nil:
			if err := write(line, length, start); err != nil {
				return err
			}
		case dropAt >= 0:
			// A line to keep after dropped ones: rewrite, from a copy of the lines before.
			if out, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644); err != nil {
				return err
			}
			if err := copyPrefix(out, path, dropAt); err != nil {
				return err
			}
			bw = bufio.NewWriterSize(out, 1<<20)
			if err := write(line, length, start); err != nil {
				return err
			}
		}
		return nil
	}
	var complete int64
	if head > 0 {
		complete, err = lines.ScanHeads(in, workers, head, parse, consume)
	} else {
		complete, err = lines.Scan(in, workers, parse, func(line []byte, n int, res *T) error {
			return consume(line, int64(len(line)), n, res)
		})
	}
	if err != nil {
		if err != keepErr {
			err = fmt.Errorf("%s: %w", path, err)
		}
		return err
	}
	if out == nil {
		end := complete
		if dropAt >= 0 {
			end = dropAt
		}
		if end == st.Size() {
			return in.Sync()
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		err = f.Truncate(end)
		if err == nil {
			err = f.Sync()
		}
		return errors.Join(err, f.Close())
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return durable.SyncDir(path)
}

// copyPrefix copies the first n bytes of the file at path to out (in the kernel, where it
// can: copy_file_range).
func copyPrefix(out *os.File, path string, n int64) error {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	m, err := out.ReadFrom(io.LimitReader(in, n))
	if err == nil && m != n {
		err = fmt.Errorf("%s: copied %d bytes of %d", path, m, n)
	}
	return err
}

// CountClass counts the records of dir's journal whose failure class is class, by the bytes
// the journal's writer gives that member ("failure_class":"CLASS"): inside a JSON string its
// quotes would be escaped, so only the member itself matches. It reads the journal a block at a
// time, without decoding it. Run it after Compact, which leaves one record per rollout.
func CountClass(dir, class string) (int, error) {
	f, err := os.Open(join(dir, JournalFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	pat := []byte(`"failure_class":"` + class + `"`)
	buf := make([]byte, lines.BlockSize+len(pat))
	n, keep := 0, 0
	for {
		m, err := f.Read(buf[keep:])
		end := keep + m
		n += bytes.Count(buf[:end], pat)
		// The last len(pat)-1 bytes may start a match that the next block ends; they cannot
		// hold a whole one, so none is counted twice.
		keep = min(end, len(pat)-1)
		copy(buf, buf[end-keep:end])
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("%s: %w", join(dir, JournalFile), err)
		}
	}
}
