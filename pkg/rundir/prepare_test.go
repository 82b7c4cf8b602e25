package rundir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
)

// Prepare readies a new run's directory, refuses what would lose or mix up results, and
// resumes a run whose manifest matches.
func TestPrepare(t *testing.T) {
	root := t.TempDir()
	input := filepath.Join(root, "tasks.jsonl")
	if err := os.WriteFile(input, []byte("{\"responses_create_params\":{\"input\":\"hi\"}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"num_repeats": 1}
	dir := filepath.Join(root, "out")
	problem := func(err error) Problem {
		t.Helper()
		var pe *PrepareError
		if !errors.As(err, &pe) {
			t.Fatalf("error %v (%T), want a *PrepareError", err, err)
		}
		return pe.Problem
	}

	d, err := Prepare(dir, PrepareOptions{Input: input, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if d.Resumed || d.Done.Len() != 0 {
		t.Errorf("new run: resumed %v, %d done", d.Resumed, d.Done.Len())
	}
	// The lock is held until Unlock: a second Prepare is refused meanwhile.
	if _, err := Prepare(dir, PrepareOptions{Input: input, Config: cfg, Resume: true}); problem(err) != Locked {
		t.Errorf("while locked: %v", err)
	}
	s, err := d.OpenSink(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := s.Write(result(0, int64(i), "", 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Write(result(1, 0, "timeout", 0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	d.Unlock()

	for _, tt := range []struct {
		name    string
		o       PrepareOptions
		want    Problem
		overlap Overlap
	}{
		{"a new run over a run", PrepareOptions{Input: input, Config: cfg}, HoldsRun, 0},
		{"another config", PrepareOptions{Input: input, Config: map[string]any{"num_repeats": 2}, Resume: true}, ManifestDiffers, 0},
		{"the input inside the directory", PrepareOptions{Input: filepath.Join(dir, JournalFile), Config: cfg}, OutputOverlaps, OverlapHolds},
		{"NeMo Gym file over the input", PrepareOptions{Input: input, Config: cfg, NemoGym: input}, OutputOverlaps, OverlapIs},
		{"NeMo Gym file over the journal", PrepareOptions{Input: input, Config: cfg, NemoGym: filepath.Join(dir, JournalFile)}, OutputOverlaps, OverlapRunFile},
		{"NeMo Gym file is the directory", PrepareOptions{Input: input, Config: cfg, NemoGym: dir}, OutputOverlaps, OverlapIs},
		{"a missing input", PrepareOptions{Input: filepath.Join(root, "missing.jsonl"), Config: cfg, Overwrite: true}, InputUnreadable, 0},
	} {
		_, err := Prepare(dir, tt.o)
		if problem(err) != tt.want {
			t.Errorf("%s: %v, want problem %d", tt.name, err, tt.want)
		}
		var oe *OverlapError
		if errors.As(err, &oe) != (tt.overlap != 0) || tt.overlap != 0 && oe.Overlap != tt.overlap {
			t.Errorf("%s: %v, want overlap %d", tt.name, err, tt.overlap)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, JournalFile)); err != nil {
		t.Fatalf("a refused Prepare touched the run: %v", err)
	}

	// A resume keeps every record; with RetryFailed the timeout goes, to run again.
	d, err = Prepare(dir, PrepareOptions{Input: input, Config: cfg, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Resumed || d.Done.Len() != 4 || !d.Done.Has(record.Key{Task: 1, Rollout: 0, Arm: "multi"}) {
		t.Errorf("resume: resumed %v, done %v", d.Resumed, d.Done)
	}
	d.Unlock()
	d, err = Prepare(dir, PrepareOptions{Input: input, Config: cfg, Resume: true, RetryFailed: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.Done.Len() != 3 || d.Done.Has(record.Key{Task: 1, Rollout: 0, Arm: "multi"}) {
		t.Errorf("resume --retry-failed: done %v", d.Done)
	}
	d.Unlock()
	mf, err := ReadManifest(dir)
	if err != nil || len(mf.Resumes) != 2 || !mf.Resumes[1].RetryFailed {
		t.Errorf("manifest resumes %+v, %v", mf, err)
	}

	// Records without a manifest are not resumed unless forced; an empty directory has
	// nothing to resume.
	if err := os.Remove(filepath.Join(dir, ManifestFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(dir, PrepareOptions{Input: input, Config: cfg, Resume: true}); problem(err) != NoManifest {
		t.Errorf("no manifest: %v", err)
	} else if JournalLines(dir) != 3 {
		t.Errorf("journal has %d lines, want 3", JournalLines(dir))
	}
	if d, err = Prepare(dir, PrepareOptions{Input: input, Config: cfg, Resume: true, Force: true}); err != nil {
		t.Fatalf("no manifest, forced: %v", err)
	}
	d.Unlock()
	if _, err := Prepare(filepath.Join(root, "empty"), PrepareOptions{Input: input, Config: cfg, Resume: true}); problem(err) != NothingToResume {
		t.Errorf("empty directory: %v", err)
	}

	// Overwrite removes the earlier run's files.
	if d, err = Prepare(dir, PrepareOptions{Input: input, Config: cfg, Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	d.Unlock()
	if JournalLines(dir) != 0 {
		t.Errorf("after Overwrite the journal has %d lines", JournalLines(dir))
	}
}

// Finish writes the Parquet file, the summary, evaluation.json and the NeMo Gym file from the
// journal.
func TestFinish(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "out")
	ng := filepath.Join(root, "ng.jsonl")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSink(dir, SinkOptions{NemoGym: filepath.Join(dir, NemoGymFile)})
	if err != nil {
		t.Fatal(err)
	}
	for i, class := range []record.FailureClass{record.FailNone, record.FailNone, record.FailTimeout} {
		if err := s.Write(result(int64(i), 0, string(class), 0.5)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fin, err := Finish(dir, FinishOptions{NemoGym: ng})
	if err != nil {
		t.Fatal(err)
	}
	if fin.Summary.Rollouts != 3 || fin.Summary.Failed != 1 || fin.NemoGymLines != 2 || fin.Evaluation == nil {
		t.Errorf("finished %+v", fin)
	}
	for _, name := range []string{ParquetFile, SummaryFile, EvaluationFile} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	if n := len(fileLines(t, ng)); n != 2 {
		t.Errorf("%s: %d lines, want 2", ng, n)
	}
	// A NeMo Gym file that cannot be written is an error, after the run's own files.
	if _, err := Finish(dir, FinishOptions{NemoGym: filepath.Join(root, "missing", "ng.jsonl")}); err == nil {
		t.Error("NeMo Gym file in a missing directory: no error")
	}
}
