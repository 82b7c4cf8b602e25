package rundir

import (
	"bytes"
	"errors"
	"os"
	"time"

	"github.com/rollout-dev/rollout/internal/durable"
	"github.com/rollout-dev/rollout/pkg/report"
)

// FinishOptions say what Finish writes besides the Parquet file and the summary.
type FinishOptions struct {
	Stats   report.StatsOptions // how the evaluation is computed
	NemoGym string              // the NeMo Gym file to write from the run's lines ("" for none)
	// Complete marks the run complete in its manifest (Manifest.Complete): it ended without an
	// interrupt, every rollout has a record. Merging shards needs every shard complete.
	Complete bool
	// Endpoints is the per-endpoint table summary.json keeps (Summary.Endpoints; nil: none).
	Endpoints []report.EndpointStats
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
	if fin.Summary, fin.Evaluation, err = FinalizeWith(dir, FinalizeOptions{Stats: o.Stats, Endpoints: o.Endpoints}); err != nil {
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
