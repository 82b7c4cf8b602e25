package loadbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/rollout-dev/rollout/pkg/runner"
)

// Floor is the CPU that Go's net/http client alone spends on one request on this machine:
// net/http's Transport configured as the runner configures it (runner.NewNetHTTPTransport)
// posting the first model request of a task to the simulator at zero latency, concurrency
// Conns, measured by this process's rusage. It is the reference the runner's CPU per turn is
// held to (a multiple of this times its requests per turn); the runner's own transport for
// plain http (internal/h1) can cost less than it.
type Floor struct {
	Requests int
	Conns    int
	Took     time.Duration
	CPU      Usage // this process, over the requests
}

// PerRequest is the client's CPU per request.
func (f *Floor) PerRequest() time.Duration { return f.CPU.CPU() / time.Duration(max(f.Requests, 1)) }

// MeasureFloor measures Floor with n requests.
func MeasureFloor(ctx context.Context, c Config, s TaskShape, n, conns int) (*Floor, error) {
	sim, _, body, err := startBareSim(ctx, c, "floor", s)
	if err != nil {
		return nil, err
	}
	defer sim.stop()
	url := sim.URL + "/chat/completions"
	client := &http.Client{Transport: runner.NewNetHTTPTransport(conns)}
	post := func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("simulator: %s", resp.Status)
		}
		return err
	}
	// Warm the connections up, outside the measurement.
	if err := post(); err != nil {
		return nil, err
	}
	jobs := make(chan struct{})
	errs := make(chan error, conns)
	var wg sync.WaitGroup
	before := selfUsage()
	start := time.Now()
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				if err := post(); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		}()
	}
feed:
	for range n {
		select {
		case jobs <- struct{}{}:
		case err := <-errs:
			close(jobs)
			wg.Wait()
			return nil, err
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	took := time.Since(start)
	after := selfUsage()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	return &Floor{Requests: n, Conns: conns, Took: took, CPU: Usage{User: after.User - before.User, System: after.System - before.System}}, ctx.Err()
}

func selfUsage() Usage {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return Usage{}
	}
	return Usage{User: time.Duration(ru.Utime.Nano()), System: time.Duration(ru.Stime.Nano())}
}
