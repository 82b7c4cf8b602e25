package store

import (
	"context"
	cryptorand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/rollout-dev/rollout/pkg/retry"
)

// Redis keys. A session is one string key holding its state, with the store's TTL:
//
//	rollout:session:<Prefix>:<id>
//
// A secret is one string key without TTL, created once with SETNX so that every instance
// sharing the database agrees on it:
//
//	rollout:secret:<Prefix>:<name>
const (
	redisSessionKey = "rollout:session:"
	redisSecretKey  = "rollout:secret:"
)

// maxUpdateAttempts bounds the optimistic transactions of one Update before it gives up with
// ErrConflict.
const maxUpdateAttempts = 50

// secretSize is the length of the random keys Secret creates.
const secretSize = 32

// redisStore is the Redis backend: sessions shared by every server instance using the same
// database and prefix.
type redisStore struct {
	c      *redis.Client
	ttl    time.Duration
	prefix string
	where  string // the URL without its password, for error messages

	// Updates of one session from this process take turns (locks), so that the optimistic
	// transactions only ever contend with other processes' updates of that session.
	mu    sync.Mutex
	locks map[string]*keyLock
}

// keyLock is one session's turn: a one-slot semaphore, so that waiting for it honours the
// context; refs counts its holders and waiters, and it is dropped when they are done.
type keyLock struct {
	sem  chan struct{}
	refs int
}

// OpenRedis opens a Redis-backed store at url (redis://[USER:PASSWORD@]HOST:PORT/DB or
// rediss:// for TLS) and checks that the server answers. Errors name the URL with its password
// redacted.
func OpenRedis(ctx context.Context, rawURL string, opts Options) (Store, error) {
	c, where, err := DialRedis(ctx, rawURL, "session store")
	if err != nil {
		return nil, err
	}
	return &redisStore{c: c, ttl: opts.ttl(), prefix: opts.Prefix, where: where, locks: map[string]*keyLock{}}, nil
}

// DialRedis connects to the Redis at rawURL (redis://[USER:PASSWORD@]HOST:PORT/DB or
// rediss://) and checks that it answers PING. It returns the client and the URL with its
// password redacted; its errors begin with what ("session store") and never hold the password.
func DialRedis(ctx context.Context, rawURL, what string) (*redis.Client, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse's error quotes the whole URL, password included: keep only its reason.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, "", fmt.Errorf("%s %q: invalid Redis URL: %v", what, redact(rawURL), err)
	}
	where := u.Redacted()
	password, _ := u.User.Password()
	scrub := func(err error) string {
		msg := err.Error()
		if password != "" {
			msg = strings.ReplaceAll(msg, password, "xxxxx")
		}
		return msg
	}
	ropts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, "", fmt.Errorf("%s %s: %s", what, where, scrub(err))
	}
	// Honour the caller's context deadlines on the socket, not only the client's timeouts.
	ropts.ContextTimeoutEnabled = true
	// Plain Redis/Valkey servers: no CLIENT SETINFO or maintenance-notification handshakes.
	ropts.DisableIdentity = true
	ropts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}

	c := redis.NewClient(ropts)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, "", fmt.Errorf("%s %s: connect to Redis at %s: %s", what, where, ropts.Addr, scrub(err))
	}
	return c, where, nil
}

func (r *redisStore) key(id string) string { return redisSessionKey + r.prefix + ":" + id }

func (r *redisStore) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("session store %s: %s: %w", r.where, op, err)
}

func (r *redisStore) Get(ctx context.Context, id string) ([]byte, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	state, err := r.c.Get(ctx, r.key(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, r.wrap("get", err)
	}
	return state, true, nil
}

// lock waits for the session's turn in this process; unlock must follow.
func (r *redisStore) lock(ctx context.Context, key string) (unlock func(), err error) {
	r.mu.Lock()
	l := r.locks[key]
	if l == nil {
		l = &keyLock{sem: make(chan struct{}, 1)}
		r.locks[key] = l
	}
	l.refs++
	r.mu.Unlock()
	release := func() {
		r.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(r.locks, key)
		}
		r.mu.Unlock()
	}
	select {
	case l.sem <- struct{}{}:
		return func() { <-l.sem; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}

// Update runs an optimistic transaction: WATCH the key, GET it, apply fn, then MULTI SET (with
// the TTL) or DEL, EXEC. When another writer changed the key in between, EXEC fails and the
// whole round is retried after a short random pause, up to maxUpdateAttempts times. Within one
// process, updates of a session take turns first, so only other processes can make it retry.
func (r *redisStore) Update(ctx context.Context, id string, fn func([]byte, bool) ([]byte, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	key := r.key(id)
	unlock, err := r.lock(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	for attempt := 0; attempt < maxUpdateAttempts; attempt++ {
		var fnErr error
		err := r.c.Watch(ctx, func(tx *redis.Tx) error {
			old, err := tx.Get(ctx, key).Bytes()
			ok := true
			switch {
			case errors.Is(err, redis.Nil):
				old, ok = nil, false
			case err != nil:
				return err
			}
			state, err := fn(old, ok)
			if err != nil {
				fnErr = err
				return err
			}
			if err := ctx.Err(); err != nil {
				return err // cancelled while fn ran: commit nothing
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				if state == nil {
					p.Del(ctx, key)
				} else {
					p.Set(ctx, key, state, r.ttl)
				}
				return nil
			})
			return err
		}, key)
		switch {
		case fnErr != nil:
			return fnErr
		case err == nil:
			return nil
		case !errors.Is(err, redis.TxFailedErr):
			return r.wrap("update", err)
		}
		if err := pause(ctx, attempt); err != nil {
			return err
		}
	}
	return ErrConflict
}

// pause waits a random time that grows with the attempt (full jitter, capped at 20ms), so that
// writers contending for one session spread out.
func pause(ctx context.Context, attempt int) error {
	ceiling := min(time.Millisecond<<min(attempt, 5), 20*time.Millisecond)
	return retry.Sleep(ctx, time.Duration(rand.Int64N(int64(ceiling))+1))
}

func (r *redisStore) Delete(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return r.wrap("delete", r.c.Del(ctx, r.key(id)).Err())
}

// Secret creates the key with SETNX (no TTL) if it does not exist, then reads it back: every
// instance gets the value of whichever wrote first.
func (r *redisStore) Secret(ctx context.Context, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := redisSecretKey + r.prefix + ":" + name
	fresh := make([]byte, secretSize)
	if _, err := cryptorand.Read(fresh); err != nil {
		return nil, err
	}
	if err := r.c.SetNX(ctx, key, fresh, 0).Err(); err != nil {
		return nil, r.wrap("secret", err)
	}
	k, err := r.c.Get(ctx, key).Bytes()
	if err != nil {
		return nil, r.wrap("secret", err)
	}
	if len(k) != secretSize {
		return nil, fmt.Errorf("session store %s: secret %q is %d bytes, want %d (delete key %s to recreate it)", r.where, name, len(k), secretSize, key)
	}
	return k, nil
}

func (r *redisStore) Close() error { return r.c.Close() }
