// Package rundir is a run's output directory: its lock (LockDir), its manifest (the input and
// settings a --resume must match), the crash-safe Sink (journal.jsonl, trajectories.jsonl and
// the NeMo Gym lines, synced side files first, journal last), Compact (what a resume does
// first: drop torn and orphaned lines, keep one record per rollout) and Finish (the end of a
// run: the journal turned into rollouts.parquet, summary.json and evaluation.json in one pass,
// then the trajectory index).
//
// The records themselves and their encodings are package record; the statistics over them
// are package report.
package rundir
