package claim

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rollout-dev/rollout/pkg/servers/store"
)

// Redis is the store of claims as keys of a Redis database: shard i's claim is the key
//
//	rollout:claim:<Run>:<i>
//
// set with SET NX and an expiry of TTL, holding the holder's token; the holder renews the
// expiry every TTL/3 while the key still holds its token, and deletes it on release. A
// holder that dies stops renewing, the key expires on the Redis server's clock, and the next
// SET NX takes the shard.
type Redis struct {
	c     *redis.Client
	Run   string // the run's name in the keys: the same for every process of one run
	TTL   time.Duration
	token string
	where string // the URL without its password
}

// OpenRedis opens the Redis claim store at rawURL (redis://[USER:PASSWORD@]HOST:PORT/DB, or
// rediss://) for the run named run, and checks that the server answers. Errors name the URL
// with its password redacted.
func OpenRedis(ctx context.Context, rawURL, run string, ttl time.Duration, holder string) (*Redis, error) {
	c, where, err := store.DialRedis(ctx, rawURL, "claim store")
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, 8)
	cryptorand.Read(nonce)
	return &Redis{c: c, Run: run, TTL: ttl, token: holder + " " + hex.EncodeToString(nonce), where: where}, nil
}

func (r *Redis) key(i int) string { return fmt.Sprintf("rollout:claim:%s:%d", r.Run, i) }

func (r *Redis) Take(ctx context.Context, i int) (Lease, bool, error) {
	ok, err := r.c.SetNX(ctx, r.key(i), r.token, r.TTL).Result()
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", r.where, err)
	}
	if !ok {
		return nil, false, nil
	}
	return &redisLease{r: r, key: r.key(i)}, true, nil
}

func (r *Redis) Close() error { return r.c.Close() }

// renewScript extends the key's expiry if it still holds the token; releaseScript deletes it
// if it does.
var (
	renewScript   = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) end return 0`)
	releaseScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)
)

type redisLease struct {
	r   *Redis
	key string
}

func (l *redisLease) Renew(ctx context.Context) (bool, error) {
	n, err := renewScript.Run(ctx, l.r.c, []string{l.key}, l.r.token, l.r.TTL.Milliseconds()).Int()
	if err != nil {
		return true, fmt.Errorf("%s: %w", l.r.where, err)
	}
	return n == 1, nil
}

func (l *redisLease) Release(ctx context.Context) error {
	if err := releaseScript.Run(ctx, l.r.c, []string{l.key}, l.r.token).Err(); err != nil {
		return fmt.Errorf("%s: %w", l.r.where, err)
	}
	return nil
}
