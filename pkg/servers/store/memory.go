package store

import (
	"context"
	"crypto/rand"
	"sync"
	"time"
)

// Memory is the in-process store: a map guarded by a mutex, with expiry checked on every read
// and swept in the background.
type Memory struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[string]memEntry
	secrets map[string][]byte

	stop chan struct{}
	once sync.Once
}

type memEntry struct {
	state   []byte
	expires time.Time
}

// NewMemory returns an in-memory store. Its sweeper runs until Close.
func NewMemory(opts Options) *Memory { return newMemory(opts, time.Now) }

// newMemory is NewMemory with a clock of the caller's (tests use a fake one).
func newMemory(opts Options, now func() time.Time) *Memory {
	m := &Memory{
		ttl:     opts.ttl(),
		now:     now,
		entries: map[string]memEntry{},
		secrets: map[string][]byte{},
		stop:    make(chan struct{}),
	}
	go m.sweep()
	return m
}

func (m *Memory) sweep() {
	every := m.ttl / 4
	if every < time.Second {
		every = time.Second
	}
	if every > time.Minute {
		every = time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.Expire()
		}
	}
}

// Expire drops every session whose TTL has run out. The sweeper calls it periodically.
func (m *Memory) Expire() {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, e := range m.entries {
		if !now.Before(e.expires) {
			delete(m.entries, id)
		}
	}
}

// Len is the number of sessions held, expired ones not yet swept included.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

// get returns the live entry; m.mu must be held.
func (m *Memory) get(id string) ([]byte, bool) {
	e, ok := m.entries[id]
	if !ok {
		return nil, false
	}
	if !m.now().Before(e.expires) {
		delete(m.entries, id)
		return nil, false
	}
	return e.state, true
}

func (m *Memory) Get(ctx context.Context, id string) ([]byte, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	state, ok := m.get(id)
	return clone(state), ok, nil
}

func (m *Memory) Update(ctx context.Context, id string, fn func([]byte, bool) ([]byte, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.get(id)
	state, err := fn(clone(old), ok)
	if err != nil {
		return err
	}
	if state == nil {
		delete(m.entries, id)
		return nil
	}
	m.entries[id] = memEntry{state: clone(state), expires: m.now().Add(m.ttl)}
	return nil
}

func (m *Memory) Delete(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.entries, id)
	return nil
}

func (m *Memory) Secret(ctx context.Context, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := m.secrets[name]; ok {
		return clone(k), nil
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	m.secrets[name] = k
	return clone(k), nil
}

func (m *Memory) Close() error {
	m.once.Do(func() { close(m.stop) })
	return nil
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}
