package rundir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/rollout-dev/rollout/pkg/record"
)

// The files of a run's output directory.
const (
	JournalFile      = "journal.jsonl"
	TrajectoriesFile = "trajectories.jsonl"
	ParquetFile      = "rollouts.parquet"
	SummaryFile      = "summary.json"
	ManifestFile     = "manifest.json"
)

// Sink is the crash-safe output of a run. While the run is alive its journal is the truth: one
// JSON record per line, appended. Each result's trajectory (and NeMo Gym line, with
// --jsonl-out) is appended to its own file before the record, and the sink syncs in batches,
// side files first, journal last. So after a crash at any moment, every record in the journal
// has its trajectory on disk, and a rollout without a record is simply run again on resume
// (Compact drops its orphaned side lines). The Parquet file and the summary are derived from
// the journal when the run ends (Finish).
type Sink struct {
	mu       sync.Mutex
	journal  *jsonlFile
	sides    []sideFile
	buf      bytes.Buffer  // for enc, the slow path
	enc      *json.Encoder // encoding/json, for the records record.AppendJSON refuses
	line     []byte
	keys     []string
	pending  int
	every    int
	interval time.Duration
	lastSync time.Time
	err      error
	redact   *redactor
	stop     chan struct{}
	done     chan struct{}
}

// sideFile is an output appended before the journal and synced before it.
type sideFile interface {
	Write(*record.Result) error
	Sync() error
	Close() error
}

// SinkOptions configure a Sink.
type SinkOptions struct {
	// SyncEvery syncs after this many records (default 256); SyncInterval syncs pending
	// records at least this often (default 200 ms). What a crash may lose is at most that:
	// rollouts that a resume runs again.
	SyncEvery    int
	SyncInterval time.Duration
	// NemoGym, when set, also writes NeMo Gym-style records to that path.
	NemoGym string
	// Secrets are replaced by redact.Placeholder in every result before any of it is written (the
	// record's strings, the trajectory, the verify answer): whatever an endpoint echoed, in
	// any field, reaches no file. Secrets shorter than redact.MinLength are left alone.
	Secrets []string
}

// OpenSink opens (for appending) the journal and the trajectories file in dir.
func OpenSink(dir string, opt SinkOptions) (*Sink, error) {
	if opt.SyncEvery <= 0 {
		opt.SyncEvery = 256
	}
	if opt.SyncInterval <= 0 {
		opt.SyncInterval = 200 * time.Millisecond
	}
	s := &Sink{every: opt.SyncEvery, interval: opt.SyncInterval, lastSync: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	s.enc = json.NewEncoder(&s.buf)
	s.enc.SetEscapeHTML(false)
	s.redact = newRedactor(opt.Secrets)
	tw, err := NewTrajectoryWriter(join(dir, TrajectoriesFile))
	if err != nil {
		return nil, err
	}
	s.sides = append(s.sides, tw)
	if opt.NemoGym != "" {
		nw, err := NewNemoGymWriter(opt.NemoGym)
		if err != nil {
			tw.Close()
			return nil, err
		}
		s.sides = append(s.sides, nw)
	}
	if s.journal, err = openJSONL(join(dir, JournalFile)); err != nil {
		for _, f := range s.sides {
			f.Close()
		}
		return nil, fmt.Errorf("journal: %w", err)
	}
	go s.ticker()
	return s, nil
}

// NemoGym is the NeMo Gym writer, or nil.
func (s *Sink) NemoGym() *NemoGymWriter {
	for _, f := range s.sides {
		if n, ok := f.(*NemoGymWriter); ok {
			return n
		}
	}
	return nil
}

func (s *Sink) ticker() {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.mu.Lock()
			if s.pending > 0 && time.Since(s.lastSync) >= s.interval && s.err == nil {
				s.err = s.syncLocked()
			}
			s.mu.Unlock()
		}
	}
}

// Write appends one result: its side lines, then its record.
func (s *Sink) Write(r *record.Result) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if s.redact != nil {
		s.redact.result(r)
	}
	for _, f := range s.sides {
		if err := f.Write(r); err != nil {
			s.err = err
			return err
		}
	}
	line, keys, ok := record.AppendJSON(s.line[:0], &r.Record, s.keys)
	s.line, s.keys = line[:0], keys
	if !ok {
		s.buf.Reset()
		if err := s.enc.Encode(&r.Record); err != nil {
			s.err = fmt.Errorf("journal: task %d rollout %d: %w", r.Record.TaskIndex, r.Record.RolloutIndex, err)
			return s.err
		}
		line = s.buf.Bytes()
	}
	if err := s.journal.writeLine(line); err != nil {
		s.err = fmt.Errorf("journal: %w", err)
		return s.err
	}
	s.pending++
	if s.pending >= s.every {
		s.err = s.syncLocked()
	}
	return s.err
}

// syncLocked makes everything written so far durable: side files first, then the journal.
func (s *Sink) syncLocked() error {
	for _, f := range s.sides {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := s.journal.Sync(); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	s.pending = 0
	s.lastSync = time.Now()
	return nil
}

// Close syncs and closes every file.
func (s *Sink) Close() error {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.err != nil {
		errs = append(errs, s.err)
	}
	for _, f := range s.sides {
		errs = append(errs, f.Close())
	}
	errs = append(errs, s.journal.Close())
	return errors.Join(errs...)
}

func join(dir, name string) string { return dir + string(os.PathSeparator) + name }
