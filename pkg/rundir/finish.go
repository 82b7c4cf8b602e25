package rundir

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"time"

	"github.com/rollout-dev/rollout/internal/durable"
	"github.com/rollout-dev/rollout/internal/lines"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
)

// FinishOptions say what Finish writes besides the Parquet file and the summary.
type FinishOptions struct {
	Stats   report.StatsOptions // how the evaluation is computed
	NemoGym string              // the NeMo Gym file to write from the run's lines ("" for none)
	// Complete marks the run complete in its manifest (Manifest.Complete): it ended without an
	// interrupt, every rollout has a record. Merging shards needs every shard complete.
	Complete bool
	// Endpoints is the per-endpoint table summary.json keeps, a JSON array (Summary.Endpoints;
	// nil: none).
	Endpoints json.RawMessage
}

// Finished is what Finish wrote.
type Finished struct {
	Summary      report.Summary
	Evaluation   *report.Evaluation
	NemoGymLines int // lines written to FinishOptions.NemoGym
}

// Finish ends a run in dir: from the journal, the truth, over every record of the run (resumed
// ones included), it derives in one pass the Parquet file, summary.json and the evaluation
// (written to evaluation.json), then the offset index of trajectories.jsonl (trajectories.idx),
// then the NeMo Gym file when asked.
func Finish(dir string, o FinishOptions) (Finished, error) {
	var fin Finished
	var err error
	if fin.Summary, fin.Evaluation, err = finalize(dir, finalizeOptions{Stats: o.Stats, Endpoints: o.Endpoints}); err != nil {
		return fin, err
	}
	var b bytes.Buffer
	if err := fin.Evaluation.WriteJSON(&b); err != nil {
		return fin, err
	}
	if err := durable.WriteFileAtomic(join(dir, EvaluationFile), b.Bytes(), 0o644); err != nil {
		return fin, err
	}
	if _, err := WriteTrajIndex(dir); err != nil {
		return fin, err
	}
	if o.NemoGym != "" {
		if fin.NemoGymLines, err = WriteNemoGym(dir, o.NemoGym); err != nil {
			return fin, err
		}
	}
	if o.Complete {
		if err := markComplete(dir, fin.Summary.Rollouts); err != nil {
			return fin, err
		}
	} else if mf, err := ReadManifest(dir); err == nil {
		fin.Summary.Status = State{Known: true, Planned: mf.Planned, Done: fin.Summary.Rollouts}.String()
	}
	return fin, nil
}

// markComplete records in dir's manifest that the run has every rollout's record (rollouts of
// them). A directory without a manifest is left as it is.
func markComplete(dir string, rollouts int) error {
	mf, err := ReadManifest(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	mf.Complete = &Completion{At: time.Now().UTC(), Rollouts: rollouts}
	return WriteManifest(dir, mf)
}

// finalizeOptions configure finalize.
type finalizeOptions struct {
	Parquet record.ParquetOptions
	// Stats say how the Evaluation is computed. The summary's standard error and interval
	// are its overall ones.
	Stats report.StatsOptions
	// Endpoints go to the summary as they are (Summary.Endpoints).
	Endpoints json.RawMessage
}

// finalize derives the run's Parquet file, its summary and the report.Evaluation of its
// records from its journal, in one pass: rollouts.parquet (written as .tmp, synced, renamed)
// and summary.json; it returns the summary and the evaluation. It reads the journal a record at a time: its memory does not
// grow with the journal's length (the report.Evaluator spills its rows to a temporary file in
// dir past a run of them; the Parquet writer holds one row group).
func finalize(dir string, opt finalizeOptions) (report.Summary, *report.Evaluation, error) {
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
