// Package claim hands out the shards of a run to the processes that run them, one holder at a
// time, by leases: a process takes the next shard nobody holds, renews its lease while it runs
// it, marks it done, and takes the next. A holder that dies (kill -9, a lost node) stops
// renewing; once its lease has lapsed another process takes the shard over. Two stores keep
// the claims: files created with O_EXCL in a directory of the shared volume (Files), or keys
// of a Redis database set with SET NX and an expiry (Redis). The done marks are files in that
// directory either way, beside the shards' own directories, so that they go with the run.
package claim

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/internal/durable"
)

// Store keeps the claims of a run's shards.
type Store interface {
	// Take takes shard i when nobody holds it: nobody took it yet, its holder released it, or
	// its holder's lease lapsed. ok is false while another holder's lease on it is live.
	Take(ctx context.Context, i int) (l Lease, ok bool, err error)
	// Close frees what the store holds (not the leases).
	Close() error
}

// Lease is the hold of one shard.
type Lease interface {
	// Renew extends the lease. held is false when the shard is no longer this holder's: its
	// lease lapsed and another holder took the shard over.
	Renew(ctx context.Context) (held bool, err error)
	// Release gives the shard up, for another holder to take at once.
	Release(ctx context.Context) error
}

// Holder names this process in the claims it writes: host and pid.
func Holder() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s pid %d", host, os.Getpid())
}

// doneName is the done mark of shard i in the claims directory.
func doneName(i int) string { return fmt.Sprintf("shard-%d.done", i) }

// Done reports whether shard i is marked done in dir, the claims directory, and what the mark
// says (the outcome MarkDone recorded).
func Done(dir string, i int) (bool, string, error) {
	b, err := os.ReadFile(filepath.Join(dir, doneName(i)))
	if errors.Is(err, fs.ErrNotExist) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	return true, strings.TrimSpace(string(b)), nil
}

// MarkDone marks shard i done in dir, recording outcome (a line such as "exit 0 by HOST pid
// N"): no process takes it again.
func MarkDone(dir string, i int, outcome string) error {
	return durable.WriteFileAtomic(filepath.Join(dir, doneName(i)), []byte(outcome+"\n"), 0o644)
}

// Files is the store of claims as files of dir on the shared volume: shard i's claims are
// shard-I.claim-G, G = 0, 1, ..., each created with O_EXCL (atomic on a local file system
// and on NFS), so that one process wins each. The holder of claim G renews it by rewriting
// its content every TTL/3; a claim whose content has not changed for TTL, as this process
// sees it on its own clock (no two nodes' clocks are compared), has lapsed, and the next
// process takes generation G+1. A holder that finds G+1 has lost the shard. A released claim
// says so, and G+1 may be taken at once.
type Files struct {
	Dir    string
	TTL    time.Duration
	Holder string
	// Now is the clock the lapse is measured on (time.Now when nil).
	Now func() time.Time

	gen  map[int]int         // shard → the latest generation seen
	seen map[string]sighting // claim file → its content and since when this process sees it
}

type sighting struct {
	content string
	since   time.Time
}

// released is the content of a released claim.
const released = "released\n"

// NewFiles returns the file store of claims in dir, creating dir.
func NewFiles(dir string, ttl time.Duration, holder string) (*Files, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Files{Dir: dir, TTL: ttl, Holder: holder}, nil
}

func (f *Files) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

func (f *Files) claimPath(i, g int) string {
	return filepath.Join(f.Dir, fmt.Sprintf("shard-%d.claim-%d", i, g))
}

// Take takes shard i: it creates the first generation of claim not yet created, when every
// earlier one is released or has lapsed.
func (f *Files) Take(_ context.Context, i int) (Lease, bool, error) {
	if f.gen == nil {
		f.gen, f.seen = map[int]int{}, map[string]sighting{}
	}
	for g := f.gen[i]; ; g++ {
		f.gen[i] = g
		path := f.claimPath(i, g)
		l := &fileLease{f: f, path: path, next: f.claimPath(i, g+1)}
		fd, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			_, err = fd.WriteString(l.content())
			if cerr := fd.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, false, fmt.Errorf("%s: %w", path, err)
			}
			return l, true, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, false, err
		}
		b, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, false, err
		}
		content := string(b)
		if content == released {
			continue
		}
		s, ok := f.seen[path]
		if !ok || s.content != content {
			s = sighting{content: content, since: f.now()}
			f.seen[path] = s
		}
		if f.now().Sub(s.since) >= f.TTL {
			continue // lapsed: its holder stopped renewing
		}
		if _, err := os.Stat(l.next); err == nil {
			continue // another process saw it lapse and took the next generation
		}
		return nil, false, nil
	}
}

func (f *Files) Close() error { return nil }

// fileLease is a claim file this process created.
type fileLease struct {
	f        *Files
	path     string
	next     string // the next generation's file: its existence means the shard was taken over
	renewals int
}

func (l *fileLease) content() string {
	return fmt.Sprintf("%s\nrenewal %d\n", l.f.Holder, l.renewals)
}

func (l *fileLease) lost() (bool, error) {
	_, err := os.Stat(l.next)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, err
}

func (l *fileLease) Renew(context.Context) (bool, error) {
	if lost, err := l.lost(); lost || err != nil {
		return !lost, err
	}
	l.renewals++
	return true, durable.WriteFileAtomic(l.path, []byte(l.content()), 0o644)
}

func (l *fileLease) Release(context.Context) error {
	if lost, err := l.lost(); lost || err != nil {
		return err
	}
	return durable.WriteFileAtomic(l.path, []byte(released), 0o644)
}
