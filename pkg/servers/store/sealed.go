package store

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"sync/atomic"
)

// ErrTampered is returned by a Sealed store's Get and Update when a session's stored value
// does not carry the MAC its writer gave it (altered in the store, or copied there from another
// session), or is older than the latest state the session's client was told of (an earlier
// state written back).
var ErrTampered = errors.New("session_tampered: the session store holds state for this session that no server wrote last (altered in the store, copied from another session, or an earlier state written back)")

// macSize is the length of the MAC a Sealed store puts before each state; a version of
// versionSize bytes follows it.
const (
	macSize     = sha256.Size
	versionSize = 8
)

// Known is what one request's client knows of its session's state: the version of the latest
// state it was told of (a server keeps it in the session's signed cookie, which the store cannot
// forge). A Sealed store reads it from the request's context (WithKnown): it refuses a stored
// state older than Version, and raises Version to each version it reads or writes, so that the
// answer can tell the client. Safe for concurrent use.
type Known struct{ version atomic.Uint64 }

// NewKnown is a Known of version v (0: the client was told of no state).
func NewKnown(v uint64) *Known {
	k := &Known{}
	k.version.Store(v)
	return k
}

// Version is the latest version known.
func (k *Known) Version() uint64 { return k.version.Load() }

// Reset forgets every version: the session's state was dropped.
func (k *Known) Reset() { k.version.Store(0) }

// raise makes v known when it is later than what is.
func (k *Known) raise(v uint64) {
	for {
		old := k.version.Load()
		if v <= old || k.version.CompareAndSwap(old, v) {
			return
		}
	}
}

type knownKey struct{}

// WithKnown returns ctx carrying k, for a Sealed store's Get and Update of k's session.
func WithKnown(ctx context.Context, k *Known) context.Context {
	return context.WithValue(ctx, knownKey{}, k)
}

func knownOf(ctx context.Context) *Known {
	k, _ := ctx.Value(knownKey{}).(*Known)
	return k
}

// sealed is a Store that MACs every state it writes and checks the MAC on every read.
type sealed struct {
	Store
	key  []byte // derived from the session key: never the key itself
	bind string // the server's name: with the id, what a MAC is bound to
}

// Sealed returns st with its states made tamper-evident: each state is stored after an
// HMAC-SHA256 of the server name bind, the session id, a version and the state, keyed with a
// key derived from sessionKey (which must be kept outside the store, e.g. a mounted Secret),
// then the version. Each write of a session's state stores the next version: one past both the
// stored one and the one the request's client knows (WithKnown). A state whose MAC does not
// match (altered in place, or another session's value copied over), or whose version is below
// the client's (an earlier, genuinely sealed state of the session written back), is ErrTampered
// on Get and Update, never returned. Secret and Delete are st's.
func Sealed(st Store, sessionKey []byte, bind string) Store {
	m := hmac.New(sha256.New, sessionKey)
	m.Write([]byte("rollout session state MAC v2"))
	return &sealed{Store: st, key: m.Sum(nil), bind: bind}
}

func (s *sealed) mac(id string, version []byte, state []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(s.bind))
	m.Write([]byte{0})
	m.Write([]byte(id))
	m.Write([]byte{0})
	m.Write(version)
	m.Write(state)
	return m.Sum(nil)
}

// open checks a stored value's MAC and its version against what k knows (k may be nil), and
// returns its version and state.
func (s *sealed) open(id string, v []byte, k *Known) (uint64, []byte, error) {
	const head = macSize + versionSize
	if len(v) < head || !hmac.Equal(v[:macSize], s.mac(id, v[macSize:head], v[head:])) {
		return 0, nil, ErrTampered
	}
	version := binary.BigEndian.Uint64(v[macSize:head])
	if k != nil && version < k.Version() {
		return 0, nil, ErrTampered
	}
	return version, v[head:], nil
}

func (s *sealed) seal(id string, version uint64, state []byte) []byte {
	out := make([]byte, macSize+versionSize, macSize+versionSize+len(state))
	binary.BigEndian.PutUint64(out[macSize:], version)
	copy(out, s.mac(id, out[macSize:], state))
	return append(out, state...)
}

func (s *sealed) Get(ctx context.Context, id string) ([]byte, bool, error) {
	v, ok, err := s.Store.Get(ctx, id)
	if err != nil || !ok {
		return nil, ok, err
	}
	k := knownOf(ctx)
	version, state, err := s.open(id, v, k)
	if err != nil {
		return nil, false, err
	}
	if k != nil {
		k.raise(version)
	}
	return state, true, nil
}

func (s *sealed) Update(ctx context.Context, id string, fn func([]byte, bool) ([]byte, error)) error {
	k := knownOf(ctx)
	var wrote uint64
	err := s.Store.Update(ctx, id, func(v []byte, ok bool) ([]byte, error) {
		var old []byte
		var version uint64
		if ok {
			var err error
			if version, old, err = s.open(id, v, k); err != nil {
				return nil, err
			}
		}
		if k != nil {
			version = max(version, k.Version())
		}
		state, err := fn(old, ok)
		if err != nil || state == nil {
			wrote = 0
			return state, err
		}
		// fn may run more than once (another writer won an attempt): the version written is the
		// last attempt's, the one stored.
		wrote = version + 1
		return s.seal(id, wrote, state), nil
	})
	if err == nil && k != nil && wrote > 0 {
		k.raise(wrote)
	}
	return err
}
