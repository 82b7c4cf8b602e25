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
// held to (a multiple of this times its requests per turn). Own is the same request loop
// through the runner's own transport (runner.NewTransport, which sends plain http through
// internal/h1), measured in turns with net/http's in the same sitting, for comparison only.
type Floor struct {
	Requests int
	Conns    int
	Took     time.Duration
	CPU      Usage // this process, over the requests
	// Own is the runner's own transport over the same loop (nil: not measured; its Own is nil).
	Own *Floor `json:",omitempty"`
}

// PerRequest is the client's CPU per request.
func (f *Floor) PerRequest() time.Duration { return f.CPU.CPU() / time.Duration(max(f.Requests, 1)) }

// floorTurns is how many turns each transport takes over the floor's requests, alternating, so
// that a change in the machine's load falls on both.
const floorTurns = 4

// MeasureFloor measures Floor with n requests through net/http's Transport, and Floor.Own with
// n through the runner's own, in turns.
func MeasureFloor(ctx context.Context, c Config, s TaskShape, n, conns int) (*Floor, error) {
	sim, _, body, err := startBareSim(ctx, c, "floor", s)
	if err != nil {
		return nil, err
	}
	defer sim.stop()
	url := sim.URL + "/chat/completions"
	netHTTP := &Floor{Conns: conns}
	own := &Floor{Conns: conns}
	clients := []struct {
		f      *Floor
		client *http.Client
	}{
		{netHTTP, &http.Client{Transport: runner.NewNetHTTPTransport(conns)}},
		{own, &http.Client{Transport: runner.NewTransport(conns)}},
	}
	for _, cl := range clients {
		// Warm the connections up, outside the measurement.
		if err := floorPost(ctx, cl.client, url, body); err != nil {
			return nil, err
		}
	}
	for turn := range floorTurns {
		// The turn's share of n: the turns add up to n.
		m := n*(turn+1)/floorTurns - n*turn/floorTurns
		for _, cl := range clients {
			took, cpu, err := floorLoop(ctx, cl.client, url, body, m, conns)
			if err != nil {
				return nil, err
			}
			cl.f.Requests += m
			cl.f.Took += took
			cl.f.CPU.User += cpu.User
			cl.f.CPU.System += cpu.System
		}
	}
	netHTTP.Own = own
	return netHTTP, ctx.Err()
}

// floorPost posts body to url and reads the answer.
func floorPost(ctx context.Context, client *http.Client, url string, body []byte) error {
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

// floorLoop makes n posts at concurrency conns, and returns the time and this process's CPU
// they took.
func floorLoop(ctx context.Context, client *http.Client, url string, body []byte, n, conns int) (time.Duration, Usage, error) {
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
				if err := floorPost(ctx, client, url, body); err != nil {
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
			return 0, Usage{}, err
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
		return 0, Usage{}, err
	default:
	}
	return took, Usage{User: after.User - before.User, System: after.System - before.System}, ctx.Err()
}

func selfUsage() Usage {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return Usage{}
	}
	return Usage{User: time.Duration(ru.Utime.Nano()), System: time.Duration(ru.Stime.Nano())}
}
