// Package rundir is a run's output directory: its lock (LockDir), its manifest (the input and
// settings a --resume must match), the crash-safe Sink (journal.jsonl, trajectories.jsonl and
// the NeMo Gym lines, synced side files first, journal last), Compact (what a resume does
// first: drop torn and orphaned lines, keep one record per rollout) and Finish (the end of a
// run: the journal turned into rollouts.parquet, summary.json and evaluation.json in one pass,
// then the trajectory index).
//
// It is also the one reader of a run directory: no other package builds the path of a run's
// file. OpenRecords says where the records are (rollouts.parquet once the run has ended, else
// the journal) and reads them (Records.Scan a record at a time, Records.Columns a Parquet row
// group a column at a time); ReadJournal reads the journal in place; OpenTrajectories reads one
// trajectory by its key through the offset index (trajectories.idx); OpenTrajectoryLines and
// OpenNemoGymLines read every trajectory or NeMo Gym line beside the journal in one pass
// (SideLines); ReadManifest, ReadManifestFields, ReadState, ReadSummary and ReadEvaluation read
// the rest. ManifestPath and ParquetPath are for messages that name those files.
//
// The records themselves and their encodings are package record; the statistics over them
// are package report.
package rundir
