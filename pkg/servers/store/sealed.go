package store

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
)

// ErrTampered is returned by a Sealed store's Get and Update when a session's stored value
// does not carry the MAC its writer gave it: it was altered in the store, or copied there from
// another session.
var ErrTampered = errors.New("session_tampered: the session store holds state for this session that no server wrote (altered in the store, or copied from another session)")

// macSize is the length of the MAC a Sealed store puts before each state.
const macSize = sha256.Size

// sealed is a Store that MACs every state it writes and checks the MAC on every read.
type sealed struct {
	Store
	key  []byte // derived from the session key: never the key itself
	bind string // the server's name: with the id, what a MAC is bound to
}

// Sealed returns st with its states made tamper-evident: each state is stored after an
// HMAC-SHA256 of the server name bind, the session id and the state, keyed with a key derived
// from sessionKey (which must be kept outside the store, e.g. a mounted Secret). A state whose
// MAC does not match (altered in place, or another session's value copied over) is ErrTampered
// on Get and Update, never returned. Secret and Delete are st's.
func Sealed(st Store, sessionKey []byte, bind string) Store {
	m := hmac.New(sha256.New, sessionKey)
	m.Write([]byte("rollout session state MAC v1"))
	return &sealed{Store: st, key: m.Sum(nil), bind: bind}
}

func (s *sealed) mac(id string, state []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(s.bind))
	m.Write([]byte{0})
	m.Write([]byte(id))
	m.Write([]byte{0})
	m.Write(state)
	return m.Sum(nil)
}

// open checks a stored value's MAC and returns its state.
func (s *sealed) open(id string, v []byte) ([]byte, error) {
	if len(v) < macSize || !hmac.Equal(v[:macSize], s.mac(id, v[macSize:])) {
		return nil, ErrTampered
	}
	return v[macSize:], nil
}

func (s *sealed) Get(ctx context.Context, id string) ([]byte, bool, error) {
	v, ok, err := s.Store.Get(ctx, id)
	if err != nil || !ok {
		return nil, ok, err
	}
	state, err := s.open(id, v)
	if err != nil {
		return nil, false, err
	}
	return state, true, nil
}

func (s *sealed) Update(ctx context.Context, id string, fn func([]byte, bool) ([]byte, error)) error {
	return s.Store.Update(ctx, id, func(v []byte, ok bool) ([]byte, error) {
		var old []byte
		if ok {
			var err error
			if old, err = s.open(id, v); err != nil {
				return nil, err
			}
		}
		state, err := fn(old, ok)
		if err != nil || state == nil {
			return state, err
		}
		return append(s.mac(id, state), state...), nil
	})
}
