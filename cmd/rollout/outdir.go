package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// printResuming says what a resume keeps: the records, and on a plain --resume the cancelled
// ones among them, which only --retry-failed runs again.
func printResuming(w io.Writer, out *rundir.Dir) {
	fmt.Fprintf(w, "rollout: resuming %s: %d rollouts already have a record\n", out.Path, out.Done.Len())
	if len(out.Changed) > 0 {
		diffs := make([]string, len(out.Changed))
		for i, d := range out.Changed {
			diffs[i] = flagDiff(d)
		}
		fmt.Fprintf(w, "rollout: from now on with other settings (the manifest names them): %s\n", strings.Join(diffs, "; "))
	}
	if out.Cancelled > 0 {
		fmt.Fprintf(w, "rollout: %d of them are cancelled records (rollouts cut short by an interrupt), kept as they are; rollout run --resume --retry-failed runs them again\n", out.Cancelled)
	}
}

// prepareOut readies --out for the run (rundir.Prepare) after refusing flags that contradict
// each other, and words rundir's refusals by the flags they concern.
func prepareOut(f runFlags, cfg runConfig) (*rundir.Dir, error) {
	switch {
	case f.force && !f.resume:
		return nil, badUsage("--force goes with --resume")
	case f.retryFailed && !f.resume:
		return nil, badUsage("--retry-failed goes with --resume")
	case f.resumeAuto && f.overwrite:
		return nil, badUsage("--resume=auto and --overwrite contradict each other")
	case f.resume && f.overwrite:
		return nil, badUsage("--resume and --overwrite contradict each other")
	case f.resume && f.input == "-":
		return nil, badUsage("--resume needs --input FILE: stdin cannot be compared with the run's input")
	}
	d, err := rundir.Prepare(f.out, rundir.PrepareOptions{Input: f.input, Config: cfg, NemoGym: f.jsonlOut, Shard: manifestShard(f.shard),
		Resume: f.resume, Force: f.force, RetryFailed: f.retryFailed, RetryTransient: f.resumeAuto && f.resume, Overwrite: f.overwrite})
	var pe *rundir.PrepareError
	if err == nil || !errors.As(err, &pe) {
		return d, err
	}
	switch pe.Problem {
	case rundir.OutputOverlaps:
		return nil, badUsage("%v", pe.Err)
	case rundir.DirUnusable:
		if errors.Is(pe.Err, fs.ErrPermission) {
			return nil, badUsage("--out %s: %v: rollout runs as uid %d gid %d, which may not write there; make the directory writable by it "+
				"(on Kubernetes a ReadWriteMany volume's CSI driver often ignores fsGroup: set the owner on the share, e.g. an NFS export's anonuid/anongid, "+
				"or the pods' runAsUser/runAsGroup to its owner)", f.out, pe.Err, os.Getuid(), os.Getgid())
		}
		return nil, badUsage("--out %s: %v", f.out, pe.Err)
	case rundir.Locked:
		return nil, transientError{fmt.Errorf("--out %w", pe.Err)}
	case rundir.InputUnreadable:
		return nil, badUsage("--input: %v", pe.Err)
	case rundir.HoldsRun:
		return nil, badUsage("--out %s already holds a run (%s); pass --resume to finish it, --overwrite to replace it, or choose another directory", f.out, pe.Other)
	case rundir.NemoGymExists:
		return nil, badUsage("--jsonl-out %s already exists; pass --overwrite to replace it, or choose another file", f.jsonlOut)
	case rundir.NemoGymOfAnotherRun:
		return nil, badUsage("--resume: --jsonl-out %s belongs to the run in %s, of which %s is a copy: give the copy its own with --jsonl-out FILE", f.jsonlOut, pe.Other, f.out)
	case rundir.OverwriteFailed:
		return nil, badUsage("--overwrite: %v", pe.Err)
	case rundir.NothingToResume:
		return nil, badUsage("--resume: %s holds no run to resume (no %s, no records)", f.out, rundir.ManifestFile)
	case rundir.NoManifest:
		return nil, badUsage("--resume: %s has %d records in %s but no %s, so they cannot be checked against this input and these settings; "+
			"if they come from this same command, pass --resume --force to write a new %s and keep them (--overwrite would delete them)",
			f.out, pe.Records, rundir.JournalFile, rundir.ManifestFile, rundir.ManifestFile)
	case rundir.ManifestUnreadable:
		return nil, badUsage("--resume: %v", pe.Err)
	case rundir.ManifestDiffers:
		diffs := make([]string, len(pe.Differences))
		for i, d := range pe.Differences {
			diffs[i] = flagDiff(d)
		}
		return nil, badUsage("--resume: %s; pass --force to resume anyway, or choose another --out", strings.Join(diffs, "; "))
	case rundir.ResumeFailed:
		var le *record.LineError
		if errors.As(pe.Err, &le) {
			return nil, badUsage("--resume: %v: the journal holds a line that is not a record; remove it (or restore the journal) and resume again", pe.Err)
		}
		return nil, fmt.Errorf("--resume: %w", pe.Err)
	}
	return nil, err
}
