package rundir

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// The one rule for every command that writes a file (run, merge, export, report --html, gen):
// an output may not be, or be inside, what the command reads (a run's directory, a task file,
// a journal), nor hold it, nor be a file of a run's directory. Paths are compared after
// resolving symbolic links, and an existing output by file identity too, so that a hard link
// to an input is caught.

// A Read is a path a command reads: a run's directory or a file.
type Read struct {
	Path string
	What string // how an error names it: "the input", "the run directory", "the shard directory"
}

// An Output is a path a command writes.
type Output struct {
	Flag string // the flag that names it ("--html", "-o"), for errors
	Path string
	Dir  bool // a directory (run --out, merge --out) rather than a file
	// Own is the command's own output directory ("" for none): a file output may be inside it,
	// but not be it, hold it, or be one of the files a run writes there.
	Own string
}

// Overlap is how an output would write over what a command reads or writes.
type Overlap int

const (
	OverlapIs      Overlap = iota + 1 // the output is Other (the same path, a symbolic or a hard link to it)
	OverlapInside                     // the output is inside the directory Other, which the command reads
	OverlapHolds                      // the output is a directory that holds Other
	OverlapRunFile                    // the output is one of the files a run writes in its directory, Other (the command's own)
	OverlapInRun                      // the output is a file of the directory Other, which holds another run
)

// An OverlapError is an output CheckOutput refused; its message is one line naming both paths.
type OverlapError struct {
	Output  Output
	Other   Read
	Overlap Overlap
}

func (e *OverlapError) Error() string {
	o, r := e.Output, e.Other
	switch e.Overlap {
	case OverlapIs:
		return fmt.Sprintf("%s %s is %s %s: it would be written over; choose another path", o.Flag, o.Path, r.What, r.Path)
	case OverlapInside:
		return fmt.Sprintf("%s %s is inside %s %s, which this command reads; write it elsewhere", o.Flag, o.Path, r.What, r.Path)
	case OverlapHolds:
		return fmt.Sprintf("%s %s contains %s %s; choose another directory", o.Flag, o.Path, r.What, r.Path)
	case OverlapRunFile:
		return fmt.Sprintf("%s %s is one of the files rollout writes in %s %s; choose another name", o.Flag, o.Path, r.What, r.Path)
	default:
		return fmt.Sprintf("%s %s is inside the run directory %s, whose files belong to that run; write it elsewhere", o.Flag, o.Path, r.Path)
	}
}

// CheckOutput refuses (with an *OverlapError) an output that is or is inside something read,
// that holds something read, that is the command's own output directory (or holds it) or a
// run's file in it, or (a file) that is in another run's directory. A file output that exists
// is compared by identity with every read file and every file directly in a read directory.
func CheckOutput(o Output, reads ...Read) error {
	out := ResolvePath(o.Path)
	st, err := os.Stat(o.Path)
	existing := err == nil && st.Mode().IsRegular()
	if o.Own != "" {
		own := Read{Path: o.Own, What: "--out"}
		switch r := ResolvePath(o.Own); {
		case out == r:
			return &OverlapError{o, own, OverlapIs}
		case within(out, r):
			return &OverlapError{o, own, OverlapHolds}
		case filepath.Dir(out) == r && isRunFile(filepath.Base(out)):
			return &OverlapError{o, own, OverlapRunFile}
		}
	}
	for _, rd := range reads {
		r := ResolvePath(rd.Path)
		switch {
		case out == r:
			return &OverlapError{o, rd, OverlapIs}
		case within(r, out):
			return &OverlapError{o, rd, OverlapInside}
		case within(out, r):
			return &OverlapError{o, rd, OverlapHolds}
		}
		if !existing {
			continue
		}
		rs, err := os.Stat(rd.Path)
		if err != nil {
			continue
		}
		if os.SameFile(st, rs) {
			return &OverlapError{o, rd, OverlapIs}
		}
		if !rs.IsDir() {
			continue
		}
		entries, _ := os.ReadDir(rd.Path)
		for _, e := range entries {
			if es, err := os.Stat(filepath.Join(rd.Path, e.Name())); err == nil && os.SameFile(st, es) {
				return &OverlapError{o, Read{Path: filepath.Join(rd.Path, e.Name()), What: "the file"}, OverlapIs}
			}
		}
	}
	if parent := filepath.Dir(out); !o.Dir && (o.Own == "" || parent != ResolvePath(o.Own)) && holdsRun(parent) {
		return &OverlapError{o, Read{Path: filepath.Dir(o.Path), What: "the run directory"}, OverlapInRun}
	}
	return nil
}

// holdsRun reports whether dir holds a run: its manifest or its journal.
func holdsRun(dir string) bool {
	for _, name := range []string{ManifestFile, JournalFile} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// isRunFile reports whether name is one of the files a run writes in its directory.
func isRunFile(name string) bool { return slices.Contains(runFiles, name) || name == LockFile }

// ReadsOf is what a command that reads the runs and files at paths reads: each path (a run's
// or a shard's directory, or a file), and the task file in each directory's manifest.
func ReadsOf(paths ...string) []Read {
	var reads []Read
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil || !st.IsDir() {
			reads = append(reads, Read{Path: p, What: "the input"})
			continue
		}
		what := "the run directory"
		mf, err := ReadManifest(p)
		if err == nil && mf.Shard != nil {
			what = "the shard directory"
		}
		reads = append(reads, Read{Path: p, What: what})
		if err == nil && mf.Input != "" && mf.Input != "-" {
			reads = append(reads, Read{Path: mf.Input, What: "the input"})
		}
	}
	return reads
}
