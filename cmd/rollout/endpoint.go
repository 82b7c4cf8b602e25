package main

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/rollout-dev/rollout/internal/localserve"
	"github.com/rollout-dev/rollout/internal/redact"
	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/fleet"
	"github.com/rollout-dev/rollout/pkg/replay"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/sim"
	"github.com/rollout-dev/rollout/pkg/sim/serving"
)

// modelEndpoint is the model a run talks to: at a URL, or served in this process (replay:GLOB,
// builtin:sim) on a loopback port.
type modelEndpoint struct {
	model    agent.Model    // with retries, its answers' size bounded and the secrets redacted
	name     string         // the model name sent: --model, else the local endpoint's own
	endpoint agent.Endpoint // the base URL, its query and secrets
	apiKey   string
	local    bool           // served in this process: there is nothing to preflight
	secrets  []string       // the API key and the secrets of every URL given, for redaction
	sim      *sim.Options   // the simulator's options with builtin:sim (part of the run's identity)
	close    func()         // stops a local endpoint
	pool     *fleet.Pool    // the pool of several endpoints (nil: one)
	simFleet *serving.Fleet // the serving simulator's replicas (--sim-replicas)
}

// openModel makes the model endpoint of a run from --model-url, --model, OPENAI_API_KEY and
// the simulator's knobs; requests go through transport with policy's retries, each attempt
// bounded by --model-timeout. On error nothing is left running.
func openModel(f runFlags, simOptions func() (sim.Options, error), e env, transport http.RoundTripper, policy retry.Policy) (ep *modelEndpoint, err error) {
	ep = &modelEndpoint{name: f.model, close: func() {}}
	if eps := fleetEndpoints(f, e.getenv); eps != nil {
		return openFleet(ep, f, eps, transport, policy)
	}
	modelURL := f.modelURL
	var local http.Handler
	localName := ""
	if glob, ok := strings.CutPrefix(f.modelURL, "replay:"); ok {
		h, err := replay.Load(glob)
		if err != nil {
			return nil, badUsage("--model-url %s: %v", f.modelURL, err)
		}
		local, localName = h, "replay"
	} else if f.modelURL == "builtin:sim" {
		// The simulator plays the reference plans of the run's own tasks.
		if f.input == "-" {
			return nil, badUsage("--model-url builtin:sim reads the tasks' plans from --input FILE, not from stdin")
		}
		opts, err := simOptions()
		if err != nil {
			return nil, usageError{err}
		}
		ts, err := sim.LoadTasks(f.input)
		if err != nil {
			return nil, badUsage("--input %s: %v", f.input, err)
		}
		h, err := sim.New(ts, opts)
		if err != nil {
			return nil, usageError{err}
		}
		local, localName = h, sim.ModelID
		ep.sim = &opts
		if f.fleet.simReplicas > 0 {
			return openSimFleet(ep, f, h, transport, policy)
		}
	} else if strings.HasPrefix(f.modelURL, "builtin:") {
		return nil, badUsage("--model-url %s: the built-in endpoint is builtin:sim", f.modelURL)
	}
	if local != nil {
		var url string
		var stop func()
		if url, stop, err = serveLocal(local, localserve.MaxConnsFor(f.concurrency)); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				stop()
			}
		}()
		ep.close, ep.local = stop, true
		modelURL = url + "/v1"
		if ep.name == "" {
			ep.name = localName
		}
	}
	if ep.name == "" {
		return nil, badUsage("run: --model NAME is required (or set ROLLOUT_MODEL)")
	}
	ep.apiKey = e.getenv("OPENAI_API_KEY")
	if ep.endpoint, err = agent.ParseEndpoint(modelURL); err != nil {
		return nil, badUsage("--model-url: %v", err)
	}
	ep.secrets = append([]string{ep.apiKey}, ep.endpoint.Secrets...)
	for _, spec := range f.servers {
		ep.secrets = append(ep.secrets, redact.URLSecrets(serverURL(spec))...)
	}
	// --model-timeout bounds each attempt; retries come on top, within
	// the rollout's deadline. The base URL's query goes with every request.
	doer := &retry.Doer{Client: &http.Client{Transport: agent.QueryTransport(transport, ep.endpoint.Query), CheckRedirect: retry.NoRedirect},
		Policy: policy, AttemptTimeout: f.modelTimeout}
	// An endpoint that echoes the key back (in an error or an answer) cannot make it reach a
	// verify request; the sink redacts whatever reaches a file.
	ep.model = agent.RedactModel(agent.NewOpenAIModel(ep.endpoint.Base, ep.apiKey, doer, agent.WithMaxAnswerBytes(f.maxModelAnswer)), ep.secrets...)
	return ep, nil
}

// openFleet makes the model endpoint of a run against the pool eps.
func openFleet(ep *modelEndpoint, f runFlags, eps []fleet.Endpoint, transport http.RoundTripper, policy retry.Policy) (*modelEndpoint, error) {
	if ep.name == "" {
		for _, e := range eps {
			if e.Model == "" {
				return nil, badUsage("run: --model NAME is required (or set ROLLOUT_MODEL, or give every endpoint its model)")
			}
		}
		ep.name = eps[0].Model
	}
	for _, e := range eps {
		ep.secrets = append(ep.secrets, e.APIKey)
		ep.secrets = append(ep.secrets, redact.URLSecrets(e.URL)...)
	}
	for _, spec := range f.servers {
		ep.secrets = append(ep.secrets, redact.URLSecrets(serverURL(spec))...)
	}
	pool, model, err := openPool(f, eps, transport, policy)
	if err != nil {
		return nil, err
	}
	ep.pool = pool
	ep.model = agent.RedactModel(model, ep.secrets...)
	return ep, nil
}

// openSimFleet serves --sim-replicas serving-simulator replicas of the simulator h on loopback
// and makes the run's pool of them.
func openSimFleet(ep *modelEndpoint, f runFlags, h http.Handler, transport http.RoundTripper, policy retry.Policy) (*modelEndpoint, error) {
	urls, fl, stop, err := startReplicas(f.fleet.simReplicas, localserve.MaxConnsFor(f.concurrency), h, *f.fleet.serving)
	if err != nil {
		return nil, err
	}
	eps := make([]fleet.Endpoint, len(urls))
	for i, u := range urls {
		eps[i] = fleet.Endpoint{URL: u, Name: fmt.Sprintf("sim-%d", i)}
	}
	if ep.name == "" {
		ep.name = sim.ModelID
	}
	ep.local, ep.close, ep.simFleet = true, stop, fl
	if _, err := openFleet(ep, f, eps, transport, policy); err != nil {
		stop()
		return nil, err
	}
	return ep, nil
}
