package gym

import (
	"context"
	"time"

	"github.com/rollout-dev/rollout/pkg/servers/store"
)

// Options configure a built-in resource server.
type Options struct {
	// Store keeps the sessions' state. Servers sharing one store (e.g. Redis) share their
	// sessions and accept each other's cookies. nil means a new in-memory store of the server's
	// own, closed by Server.Close.
	Store store.Store
	// TTL is the session lifetime after its last write for the store New opens when Store is
	// nil; 0 means store.DefaultTTL.
	TTL time.Duration
	// Key signs the session cookies (at least MinKeySize bytes), e.g. read from a mounted
	// Kubernetes Secret, so that who may write the store cannot sign cookies. nil: the store's
	// shared secret "cookie:<name>", created in the store on first use.
	Key []byte
}

// MinKeySize is the least length of Options.Key.
const MinKeySize = 32

// Server is one built-in resource server, an http.Handler.
type Server struct {
	*Handler
	own store.Store // the store New opened, closed by Close; nil when Options.Store was given
}

// Close releases the server's own session store (not a store passed in Options).
func (s *Server) Close() error {
	if s.own != nil {
		return s.own.Close()
	}
	return nil
}

// New returns the resource server b, keeping its sessions in opts.Store, or in a new in-memory
// store of its own (with the name as key prefix) when opts.Store is nil.
func New(ctx context.Context, b Builtin, opts Options) (*Server, error) {
	st, own := opts.Store, store.Store(nil)
	if st == nil {
		st = store.NewMemory(store.Options{Prefix: b.Name, TTL: opts.TTL})
		own = st
	}
	h, err := NewHandler(ctx, b, st, opts.Key)
	if err != nil {
		if own != nil {
			own.Close()
		}
		return nil, err
	}
	return &Server{Handler: h, own: own}, nil
}
