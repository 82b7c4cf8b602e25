package session

import (
	"context"
	"errors"
)

// OpenRedis opens a Redis-backed store. (Implemented with github.com/redis/go-redis/v9.)
func OpenRedis(ctx context.Context, url string, opts Options) (Store, error) {
	return nil, errors.New("session: redis store not implemented yet")
}
