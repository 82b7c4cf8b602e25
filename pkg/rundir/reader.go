package rundir

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
)

// The reader of a run directory: what report, view, export, merge and show read of a run goes
// through these functions (and OpenTrajectories, ReadManifest, ReadState), so that no other
// package builds the path of a run's file.

// Records is where the records of a run directory are read from: rollouts.parquet once the
// run has ended, else the journal.
type Records struct {
	Dir  string
	Path string // the file the records are read from
	// Parquet is set when Path is rollouts.parquet: the file is there and no process writes
	// the directory (a run being written has its records in the journal; a Parquet file
	// there is of an earlier session).
	Parquet bool
	Live    bool // a process writes the directory (Live)
}

// OpenRecords says where the records of the run in dir are read from. A directory with
// neither rollouts.parquet nor a journal is an error naming both.
func OpenRecords(dir string) (*Records, error) {
	r := &Records{Dir: dir, Live: Live(dir)}
	pq := filepath.Join(dir, ParquetFile)
	if _, err := os.Stat(pq); err == nil && !r.Live {
		r.Path, r.Parquet = pq, true
		return r, nil
	}
	j := filepath.Join(dir, JournalFile)
	if _, err := os.Stat(j); err != nil {
		return nil, fmt.Errorf("%s: no %s or %s: not a run's output directory", dir, ParquetFile, JournalFile)
	}
	r.Path = j
	return r, nil
}

// Note is what a reader tells its user when the records come from the journal ("" from
// rollouts.parquet): "DIR is being written by a running run: reading DIR/journal.jsonl", or
// "DIR has no rollouts.parquet (a run not finished?): reading DIR/journal.jsonl".
func (r *Records) Note() string {
	switch {
	case r.Parquet:
		return ""
	case r.Live:
		return fmt.Sprintf("%s is being written by a running run: reading %s", r.Dir, r.Path)
	}
	return fmt.Sprintf("%s has no %s (a run not finished?): reading %s", r.Dir, ParquetFile, r.Path)
}

// Scan calls fn with each record, in the file's order; each call gets a record of its own.
// An error names the file.
func (r *Records) Scan(fn func(rec *record.Record) error) error {
	if !r.Parquet {
		return ScanJournal(r.Path, fn)
	}
	recs, err := record.ReadParquet(r.Path)
	if err != nil {
		if !strings.Contains(err.Error(), r.Path) {
			err = fmt.Errorf("%s: %w", r.Path, err)
		}
		return err
	}
	for i := range recs {
		if err := fn(&recs[i]); err != nil {
			return err
		}
	}
	return nil
}

// ReadJournal calls fn with each record of dir's journal, in order; the record is only valid
// during the call (the maps and lists it points to are its own). A directory without a
// journal is an error saying it is not a run directory.
func ReadJournal(dir string, fn func(rec *record.Record) error) error {
	path := filepath.Join(dir, JournalFile)
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%s: not a run directory (no %s): %w", dir, JournalFile, err)
	}
	return record.ScanJSONLInPlace(path, fn)
}

// HasJournal says whether dir has a journal; when it has not, err says why (an
// *os.PathError naming the file).
func HasJournal(dir string) (bool, error) {
	_, err := os.Stat(filepath.Join(dir, JournalFile))
	return err == nil, err
}

// ScanJournalOf is ScanJournal over the journal of the run in dir.
func ScanJournalOf(dir string, fn func(rec *record.Record) error) error {
	return ScanJournal(filepath.Join(dir, JournalFile), fn)
}

// JournalSize is the length of dir's journal in bytes (0 when it has none): a reader that
// follows a run reads it again when it grows.
func JournalSize(dir string) int64 {
	if st, err := os.Stat(filepath.Join(dir, JournalFile)); err == nil {
		return st.Size()
	}
	return 0
}

// ReadSummary reads the summary.json Finish wrote in dir. When it cannot be read (a run not
// finished, dir a file) the error is an *os.PathError; a file that is not a summary is an
// error naming it.
func ReadSummary(dir string) (report.Summary, error) {
	var sum report.Summary
	path := filepath.Join(dir, SummaryFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return sum, err
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		return sum, fmt.Errorf("%s: %w", path, err)
	}
	return sum, nil
}

// HasEvaluation says whether dir holds the evaluation.json Finish writes.
func HasEvaluation(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, EvaluationFile))
	return err == nil
}

// ReadEvaluation reads the evaluation.json Finish wrote in dir, and returns it with the
// file's path (for a reader to say where it comes from); an error names the file.
func ReadEvaluation(dir string) (*report.Evaluation, string, error) {
	path := filepath.Join(dir, EvaluationFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, path, err
	}
	var e report.Evaluation
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, path, fmt.Errorf("%s: %w", path, err)
	}
	return &e, path, nil
}

// ReadManifestFields reads dir's manifest as JSON members, every one of them (a reader that
// shows the manifest whole); nil, nil when there is none, and an error naming the file when
// it is not a JSON object.
func ReadManifestFields(dir string) (map[string]any, error) {
	path := filepath.Join(dir, ManifestFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// HasManifest says whether dir has a manifest.
func HasManifest(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ManifestFile))
	return err == nil
}

// ManifestPath is the path of dir's manifest, for a message that names it.
func ManifestPath(dir string) string { return filepath.Join(dir, ManifestFile) }

// ParquetPath is the path of dir's rollouts.parquet, for a message that names it.
func ParquetPath(dir string) string { return filepath.Join(dir, ParquetFile) }

// Path is the path of the trajectories file the reader reads, for a message that names it.
func (t *Trajectories) Path() string { return filepath.Join(t.dir, TrajectoriesFile) }
