// Package report is the statistics of a run's records and their rendering.
//
// Stats counts records as they come in (the live progress and summary.json's Summary);
// Evaluate and Evaluator compute an Evaluation (mean reward, task-clustered standard error,
// 95% interval over tasks (meanInterval), pass@k and pass^k, per arm and per group) written as text,
// Markdown or JSON (evaluation.json); Compare pairs two runs' records by task and repeat.
//
// Records are package record's; a run directory's are read through package rundir
// (rundir.OpenRecords, rundir.ReadJournal).
package report
