// Package store is the session store of rollout's built-in resource servers: the state a
// server keeps for one rollout (one cookie session) between seed_session, its tool calls and
// verify.
//
// One interface, two backends: Memory (the default; one process) and Redis (several server
// instances behind one address share their sessions). A store is opened from a URL by Open:
//
//	""  or "memory"            in-process memory
//	redis://HOST:PORT/DB       a Redis server (github.com/redis/go-redis/v9); also
//	redis://USER:PASSWORD@HOST:PORT/DB, and rediss:// for TLS
//
// State is opaque bytes (the servers keep JSON). Every write refreshes the session's TTL, so a
// session lives TTL after its last write; an abandoned session is dropped when its TTL runs out,
// and a finished one can be dropped at once with Delete.
package store

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"strings"
	"time"
)

// DefaultTTL is how long a session outlives its last write unless Options.TTL says otherwise.
const DefaultTTL = time.Hour

// ErrConflict is returned by Update when the session kept changing under it (another writer won
// every optimistic attempt). It does not happen with Memory.
var ErrConflict = errors.New("session: state changed concurrently; update abandoned")

// Store keeps per-session state. Implementations are safe for concurrent use.
type Store interface {
	// Get returns the session's state; ok is false when there is none (never seeded, expired or
	// deleted).
	Get(ctx context.Context, id string) (state []byte, ok bool, err error)
	// Update replaces the session's state with fn's result, atomically with respect to other
	// updates of the same session, and refreshes its TTL. fn gets the current state (ok false
	// when there is none); it may be called more than once, so it must not have side effects.
	// When fn returns an error the state is left as it was and Update returns that error; when
	// it returns nil state the session is deleted.
	Update(ctx context.Context, id string, fn func(old []byte, ok bool) ([]byte, error)) error
	// Delete drops the session's state (a no-op when there is none).
	Delete(ctx context.Context, id string) error
	// Secret returns a random 32-byte key shared by every user of the store under this name,
	// created on first use and never expiring: the key that signs session cookies, so that
	// every instance of a server sharing the store accepts the others' cookies.
	Secret(ctx context.Context, name string) ([]byte, error)
	// Close releases the store's resources.
	Close() error
}

// Options configure a store.
type Options struct {
	// Prefix namespaces the keys, e.g. the resource server's name, so that several servers
	// share one Redis database without seeing each other's sessions.
	Prefix string
	// TTL is how long a session outlives its last write; 0 means DefaultTTL.
	TTL time.Duration
}

func (o Options) ttl() time.Duration {
	if o.TTL <= 0 {
		return DefaultTTL
	}
	return o.TTL
}

// Open opens the store that url names: "" or "memory" for an in-memory store, redis://… for
// Redis.
func Open(ctx context.Context, url string, opts Options) (Store, error) {
	switch {
	case url == "" || url == "memory" || url == "memory:":
		return NewMemory(opts), nil
	case strings.HasPrefix(url, "redis://") || strings.HasPrefix(url, "rediss://"):
		return OpenRedis(ctx, url, opts)
	default:
		return nil, fmt.Errorf("session store %q: unknown kind; want memory or redis://HOST:PORT/DB", redact(url))
	}
}

// redact is url with any password replaced, for error messages.
func redact(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil {
		if i := strings.LastIndex(raw, "@"); i >= 0 {
			return "…" + raw[i:]
		}
		return raw
	}
	return u.Redacted()
}
