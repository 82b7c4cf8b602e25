package rundir

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/internal/durable"
	"github.com/rollout-dev/rollout/internal/jsonfast"
	"github.com/rollout-dev/rollout/internal/lines"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
)

// Manifest identifies what a run in an output directory is running, so that a resume can
// refuse to mix results of another dataset or configuration.
type Manifest struct {
	Version int `json:"version"`
	// Input is the task file; InputSHA256 the hash of its bytes.
	Input       string `json:"input"`
	InputSHA256 string `json:"input_sha256"`
	// Config holds the settings that change results (arm, repeats, model, servers, rounds,
	// sampling, seeds); ConfigSHA256 is the hash of its JSON. Operational settings
	// (concurrency, timeouts, retries) may change between resumes.
	Config       json.RawMessage `json:"config"`
	ConfigSHA256 string          `json:"config_sha256"`
	CreatedAt    time.Time       `json:"created_at"`
	// JSONLOut is the run's --jsonl-out file, which belongs to the run like the files in its
	// directory: made from the journal at the end, replaced by each resume. It is relative to
	// the run's directory (absolute in manifests written before), so that a copy of the
	// directory elsewhere writes its own; JSONLOutPath resolves it.
	JSONLOut string `json:"jsonl_out,omitempty"`
	// Dir is the run's directory (absolute, symbolic links resolved) when the manifest was
	// last written: a resume from another directory is of a copy or a move.
	Dir string `json:"dir,omitempty"`
	// Resumes lists when the run was resumed, and whether a changed input or config was
	// forced.
	Resumes []Resume `json:"resumes,omitempty"`
	// Shard is the part of a sharded run the directory holds (nil: the whole run). It is not
	// part of the config, so that the shards of one run have the same config hash.
	Shard *Shard `json:"shard,omitempty"`
	// Complete is set when every rollout of the run (or shard) has a record: the run ended
	// without an interrupt. A resume clears it until it ends so.
	Complete *Completion `json:"complete,omitempty"`
	// Planned is the number of rollouts the run (or shard) plans in all, written when it
	// starts (0: not known, as for a task file read from stdin). With Complete unset, the
	// run holds fewer: it was interrupted, stopped early, crashed, or is running.
	Planned int `json:"planned,omitempty"`
	// MergedFrom lists the shard directories a merged run was made of.
	MergedFrom []string `json:"merged_from,omitempty"`
	// Missing lists the shards a partial merge did not have (by index).
	Missing []int `json:"missing_shards,omitempty"`
	// Short lists the shards a partial merge took although they lack records or trajectories
	// their manifests say they finished with.
	Short []ShortShard `json:"short_shards,omitempty"`
}

// Shard is the part of a sharded run a directory holds: the tasks whose index is Index mod
// Count.
type Shard struct {
	Index int `json:"index"`
	Count int `json:"count"`
}

func (s *Shard) String() string {
	if s == nil {
		return "none"
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// Completion is when a run ended with every rollout recorded, and how many records it had.
type Completion struct {
	At       time.Time `json:"at"`
	Rollouts int       `json:"rollouts"`
}

// Resume is one resume of a run.
type Resume struct {
	At          time.Time `json:"at"`
	Forced      bool      `json:"forced,omitempty"`
	RetryFailed bool      `json:"retry_failed,omitempty"`
	// Changed lists the settings this resume changed ("config.model was "a", now "b""); the
	// manifest names the new ones from then on.
	Changed []string `json:"changed,omitempty"`
	// RetryTransient: the records of transient failures (record.FailureClass.Transient) were
	// run again, as --resume=auto does.
	RetryTransient bool `json:"retry_transient,omitempty"`
}

// NewManifest hashes the input file and the config.
func NewManifest(input string, config any) (*Manifest, error) {
	h, err := HashFile(input)
	if err != nil {
		return nil, err
	}
	cfg, err := json.Marshal(config)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(cfg)
	return &Manifest{Version: 1, Input: input, InputSHA256: h, Config: cfg, ConfigSHA256: hex.EncodeToString(sum[:]), CreatedAt: time.Now().UTC()}, nil
}

// HashFile is the SHA-256 of a file's bytes, in hex.
func HashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// InputNow is the SHA-256 of the run's task file as the manifest names it, read now, to compare
// with InputSHA256 (what the run read). known is false when it cannot be told: the input was
// standard input, the manifest has no hash, or the file cannot be read (moved or gone).
func (m *Manifest) InputNow() (sum string, known bool) {
	if m.Input == "" || m.Input == "-" || m.InputSHA256 == "" {
		return "", false
	}
	sum, err := HashFile(m.Input)
	return sum, err == nil
}

// JSONLOutPath is the absolute path of the run's --jsonl-out file ("" for none), for the run
// in dir.
func (m *Manifest) JSONLOutPath(dir string) string {
	if m.JSONLOut == "" || filepath.IsAbs(m.JSONLOut) {
		return m.JSONLOut
	}
	return filepath.Join(ResolvePath(dir), m.JSONLOut)
}

// relativeTo is path (absolute) relative to the directory dir (absolute), or path itself when
// it cannot be.
func relativeTo(dir, path string) string {
	if rel, err := filepath.Rel(dir, path); err == nil && path != "" {
		return rel
	}
	return path
}

// Differences lists how m (this invocation) differs from the recorded run: a changed input
// or config, in words a user can act on. Empty when they match.
func (m *Manifest) Differences(recorded *Manifest) []string {
	var d []string
	if m.InputSHA256 != recorded.InputSHA256 {
		d = append(d, fmt.Sprintf("the input differs: %s (sha256 %.12s) was run, this is %s (sha256 %.12s)", recorded.Input, recorded.InputSHA256, m.Input, m.InputSHA256))
	}
	if m.ConfigSHA256 != recorded.ConfigSHA256 {
		d = append(d, diffJSON("", recorded.Config, m.Config)...)
	}
	if m.JSONLOut != recorded.JSONLOut {
		d = append(d, fmt.Sprintf("--jsonl-out was %s, now %s", orUnset(recorded.JSONLOut), orUnset(m.JSONLOut)))
	}
	if m.Shard.String() != recorded.Shard.String() {
		d = append(d, fmt.Sprintf("--shard was %s, now %s", recorded.Shard, m.Shard))
	}
	return d
}

// diffJSON lists the members in which two JSON objects differ, descending into objects:
// "sim.Latency was "0", now "5ms"".
func diffJSON(prefix string, was, now json.RawMessage) []string {
	var a, b map[string]json.RawMessage
	if json.Unmarshal(was, &a) != nil || json.Unmarshal(now, &b) != nil {
		return []string{fmt.Sprintf("%s was %s, now %s", strings.TrimSuffix(prefix, "."), orNone(was), orNone(now))}
	}
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var names []string
	for k := range keys {
		if !sameJSON(a[k], b[k]) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var d []string
	for _, k := range names {
		if a[k] != nil && b[k] != nil && bytes.HasPrefix(bytes.TrimSpace(a[k]), []byte("{")) && bytes.HasPrefix(bytes.TrimSpace(b[k]), []byte("{")) {
			d = append(d, diffJSON(prefix+k+".", a[k], b[k])...)
			continue
		}
		d = append(d, fmt.Sprintf("%s%s was %s, now %s", prefix, k, orNone(a[k]), orNone(b[k])))
	}
	return d
}

func orUnset(s string) string {
	if s == "" {
		return "unset"
	}
	return s
}

func orNone(v json.RawMessage) string {
	if v == nil {
		return "unset"
	}
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return string(v)
	}
	return b.String()
}

// sameJSON compares two JSON values, ignoring layout.
func sameJSON(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return orNone(a) == orNone(b)
}

// WriteManifest writes the manifest atomically.
func WriteManifest(dir string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return durable.WriteFileAtomic(join(dir, ManifestFile), append(b, '\n'), 0o644)
}

// ReadManifest reads the manifest of dir; os.ErrNotExist when there is none.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(join(dir, ManifestFile))
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", join(dir, ManifestFile), err)
	}
	return &m, nil
}

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
func Compact(dir, nemoGym string, keep func(*record.Record) bool) (record.Done, error) {
	done := record.Done{}
	jpath := join(dir, JournalFile)
	if _, err := os.Stat(jpath); errors.Is(err, os.ErrNotExist) {
		return done, nil
	}
	workers := lines.Workers()
	decoders := make([]record.Decoder, workers)
	// The kept records' keys, in order: the trajectories file holds their lines in the same
	// order (the Sink writes a result's trajectory line, then its record), so that a
	// trajectory line is usually the one of the next kept record, and needs no lookup.
	var order []record.Key
	presize := func(lines int) {
		done = make(record.Done, lines)
		order = make([]record.Key, 0, lines)
	}
	type journalLine struct {
		key record.Key
		rec *record.Record // with keep, or when the fast path could not read the key
		err error
	}
	err := rewriteLines(jpath, workers, 0, presize, func(w int, line []byte, res *journalLine) {
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
			// One map access: a key already there leaves the length alone.
			m := len(done)
			done[res.key] = struct{}{}
			if len(done) == m {
				return false, nil
			}
		} else {
			if _, dup := done[res.key]; dup || !keep(res.rec) {
				return false, nil
			}
			done[res.key] = struct{}{}
		}
		order = append(order, res.key)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	// A trajectory line is kept if it is the first of a kept record. While the lines come in
	// the records' order (lines of rollouts without a record aside), that is the line of
	// the next record; at the first line out of that order, the lines kept so far are
	// noted, and every line is looked up from there on.
	type keyLine struct {
		task, rollout int64
		arm           []byte // in the line
		ok            bool
	}
	var intern record.Decoder
	next := 0
	var seen record.Done
	tpath := join(dir, TrajectoriesFile)
	err = rewriteLines(tpath, workers, sideLineHead, nil, func(_ int, line []byte, res *keyLine) {
		res.task, res.rollout, res.arm, _, res.ok = jsonfast.LineKeys(line, "task_index", "rollout_index", "arm")
	}, func(line []byte, length, at int64, _ int, res *keyLine) (bool, error) {
		var key record.Key
		if length > int64(len(line)) {
			k, err := decodeTrajKey(tpath, line, length, at)
			if err != nil {
				return false, nil
			}
			key = record.Key{Task: k.Task, Rollout: k.Rollout, Arm: intern.Intern([]byte(k.Arm))}
		} else if res.ok {
			if seen == nil && next < len(order) {
				if k := &order[next]; k.Task == res.task && k.Rollout == res.rollout && k.Arm == string(res.arm) {
					next++
					return true, nil
				}
			}
			key = record.Key{Task: res.task, Rollout: res.rollout, Arm: intern.Intern(res.arm)}
		} else {
			k, err := decodeTrajKey(tpath, line, length, at)
			if err != nil {
				return false, nil
			}
			key = record.Key{Task: k.Task, Rollout: k.Rollout, Arm: k.Arm}
		}
		if _, ok := done[key]; !ok {
			return false, nil
		}
		if seen == nil {
			if next < len(order) && order[next] == key {
				next++
				return true, nil
			}
			seen = make(record.Done, next)
			for _, k := range order[:next] {
				seen[k] = struct{}{}
			}
		}
		if _, dup := seen[key]; dup {
			return false, nil
		}
		seen[key] = struct{}{}
		return true, nil
	})
	order = nil
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
func keepNemoGymLines(path string, workers int, done record.Done) error {
	var intern record.Decoder
	seen := make(record.Done, len(done))
	return rewriteLines(path, workers, sideLineHead, nil, func(int, []byte, *struct{}) {}, func(line []byte, length, at int64, _ int, _ *struct{}) (bool, error) {
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
		if _, ok := done[key]; !ok {
			return false, nil
		}
		if _, dup := seen[key]; dup {
			return false, nil
		}
		seen[key] = struct{}{}
		return true, nil
	})
}

// rewriteLines makes the file at path hold its complete lines for which keep is true, in
// order (a torn last line is dropped), and syncs it. parse runs on workers goroutines, ahead
// of keep, which gets what it made of each line, with the line's whole length (without its
// newline) and where it starts in the file. With head 0, every line is held whole; with head
// above 0, parse and keep get at most the first head bytes of a line (lines.ScanHeads), and a
// longer line that is kept is copied from the file by its offset, never held whole. presize,
// if set, is first told about how many lines the file has (estimated from its first lines).
// The file is rewritten (through a temporary file that is synced and renamed) only if a line
// to keep follows one to drop: the lines before the first dropped one are copied by the
// kernel, the others written. Otherwise the lines to drop, if any, are at the end, and the
// file is cut short.
func rewriteLines[T any](path string, workers, head int, presize func(lines int), parse func(w int, line []byte, res *T), keep func(line []byte, length, at int64, n int, res *T) (bool, error)) (err error) {
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
	if presize != nil {
		// A sixteenth more than the estimate, for the lines that are shorter.
		n := lines.Estimate(path)
		presize(n + n/16)
	}
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

// FinalizeOptions configure FinalizeWith.
type FinalizeOptions struct {
	Parquet record.ParquetOptions
	// Stats say how the Evaluation is computed. The summary's standard error and interval
	// are its overall ones.
	Stats report.StatsOptions
	// Endpoints go to the summary as they are (Summary.Endpoints).
	Endpoints []report.EndpointStats
}

// Finalize derives the run's Parquet file and summary from its journal: rollouts.parquet
// (written as .tmp, synced, renamed) and summary.json. It returns the summary.
func Finalize(dir string, opt record.ParquetOptions) (report.Summary, error) {
	sum, _, err := FinalizeWith(dir, FinalizeOptions{Parquet: opt})
	return sum, err
}

// FinalizeWith is Finalize, also returning the report.Evaluation of the records, computed in the
// same pass over the journal. It reads the journal a record at a time: its memory does not
// grow with the journal's length (the report.Evaluator spills its rows to a temporary file in
// dir past a run of them; the Parquet writer holds one row group).
func FinalizeWith(dir string, opt FinalizeOptions) (report.Summary, *report.Evaluation, error) {
	pw, err := record.NewParquetWriter(join(dir, ParquetFile), opt.Parquet)
	if err != nil {
		return report.Summary{}, nil, err
	}
	var (
		stats report.Stats
		res   record.Result
	)
	ev := report.NewEvaluator(opt.Stats)
	ev.SpillTo(dir)
	defer ev.Close()
	ev.Reserve(lines.Estimate(join(dir, JournalFile)))
	err = record.ScanJSONLInPlace(join(dir, JournalFile), func(rec *record.Record) error {
		stats.Add(rec)
		ev.Add(rec)
		// The Parquet writer keeps a copy of the record until its batch is written; the maps
		// and lists it points to are the record's own.
		res.Record = *rec
		return pw.Write(&res)
	})
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	if cerr := pw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return report.Summary{}, nil, err
	}
	eval := ev.Evaluation()
	if err := ev.Err(); err != nil {
		return report.Summary{}, nil, err
	}
	sum := stats.Summary()
	if !opt.Stats.ScoreFailuresAsZero {
		sum.SetScores(&eval.Overall)
	}
	// The behaviour means as the evaluation computes them, over its sorted rows: they do not
	// depend on the order of the journal (a merge of shards has the records in another order
	// than one process).
	sum.MeanRounds, sum.MeanToolCalls, sum.MeanLatencyMs = eval.Overall.MeanRounds, eval.Overall.MeanToolCalls, eval.Overall.MeanLatencyMs
	sum.Endpoints = opt.Endpoints
	if err := report.WriteSummaryJSON(join(dir, SummaryFile), sum); err != nil {
		return report.Summary{}, nil, err
	}
	return sum, eval, nil
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
