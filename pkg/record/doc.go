// Package record is what a rollout leaves behind: the Record (one line per rollout, success
// or failure), its Key, the set of rollouts done (Done), the failure classes (FailureClass,
// with Infra for the ones --retry-failed runs again) and Clip for error text.
//
// It also holds the two encodings of a Record: the JSON line of a run's journal (AppendJSON
// writes it, Decoder and ScanJSONL read it, with a fast path that gives the same result as
// encoding/json or leaves the line to it) and the Parquet file (ParquetWriter, ReadParquet).
// The run directory that holds these files is package rundir; statistics over records are
// package report.
package record
