package view

import (
	"net/http"
	"sync"
	"time"

	"github.com/rollout-dev/rollout/pkg/rundir"
)

// LiveRefresh is the seconds after which the overview of a run being written reloads itself.
const LiveRefresh = 5

// Follow serves the pages of runs that may still be written: before a request, when a run
// was being written and its journal has grown (or the run has ended) since the runs were
// read, they are read again (at most once a second). A failed reload keeps the pages served.
type Follow struct {
	dirs  []string
	o     Options
	hosts []string
	mu    sync.Mutex
	h     *Handler
	sizes []int64
	live  bool
	last  time.Time
	// Reloaded, when set, is called after each reload with the new data or the error.
	Reloaded func(*Data, error)
}

// NewFollow serves d, read from dirs with o, reading them again as they grow.
func NewFollow(dirs []string, o Options, d *Data, hosts []string) (*Follow, error) {
	h, err := NewHandler(d)
	if err != nil {
		return nil, err
	}
	h.Hosts = hosts
	return &Follow{dirs: dirs, o: o, hosts: hosts, h: h, sizes: journalSizes(dirs), live: d.Live(), last: time.Now()}, nil
}

func journalSizes(dirs []string) []int64 {
	out := make([]int64, len(dirs))
	for i, d := range dirs {
		out[i] = rundir.JournalSize(d)
	}
	return out
}

func (f *Follow) handler() *Handler {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.live || time.Since(f.last) < time.Second {
		return f.h
	}
	f.last = time.Now()
	sizes := journalSizes(f.dirs)
	changed := false
	for i := range sizes {
		changed = changed || sizes[i] != f.sizes[i]
	}
	stillLive := false
	for _, d := range f.dirs {
		stillLive = stillLive || rundir.Live(d)
	}
	if !changed && stillLive {
		return f.h
	}
	d, err := Load(f.dirs, f.o)
	if err == nil {
		var h *Handler
		if h, err = NewHandler(d); err == nil {
			h.Hosts = f.hosts
			f.h, f.sizes, f.live = h, sizes, d.Live()
		}
	}
	if f.Reloaded != nil {
		f.Reloaded(d, err)
	}
	return f.h
}

func (f *Follow) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.handler().ServeHTTP(w, r) }
