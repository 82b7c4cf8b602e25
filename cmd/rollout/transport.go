package main

import (
	"fmt"

	"github.com/rollout-dev/rollout/pkg/runner"
)

// newTransport is the HTTP transport of a run of concurrency rollouts in flight: the runner's
// own for plain http (internal/h1) with net/http's for the rest, or net/http's for every
// request when ROLLOUT_HTTP_TRANSPORT=net/http (a way around the runner's own, should a
// server need what only net/http does).
func newTransport(e env, concurrency int) (*runner.Transport, error) {
	switch v := e.getenv("ROLLOUT_HTTP_TRANSPORT"); v {
	case "":
		return runner.NewTransport(concurrency), nil
	case "net/http":
		return runner.NewNetHTTPTransport(concurrency), nil
	default:
		return nil, usageError{fmt.Errorf("ROLLOUT_HTTP_TRANSPORT=%q: want net/http, or unset for the runner's own transport for plain http", v)}
	}
}
