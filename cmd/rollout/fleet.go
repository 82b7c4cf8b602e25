package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/rollout-dev/rollout/internal/durable"
	"github.com/rollout-dev/rollout/internal/redact"
	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/fleet"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/runner"
	"github.com/rollout-dev/rollout/pkg/sim/serving"
)

// fleetFlags are rollout run's flags of a pool of model endpoints.
type fleetFlags struct {
	route       string
	auto        bool // --concurrency auto[:MAX]
	ejectAfter  int
	loadFactor  float64
	simReplicas int
	endpoints   []fleet.Endpoint // the config file's endpoints: list, their keys not yet read
	keyEnvs     []string         // the environment variable of each of endpoints' key
	pool        *fleet.Pool      // the run's pool, once open (nil: one endpoint)
	serving     *serving.Config  // the serving simulator's knobs (--sim-replicas)
	simFleet    *serving.Fleet   // its replicas, once started
	secrets     []string         // what printPool redacts
}

// DefaultAutoMax is the most rollouts in flight of --concurrency auto without :MAX.
const DefaultAutoMax = 1024

// fleetFlagSet defines --concurrency (N, auto, auto:MAX), --route, --eject-after, --load-factor
// and --sim-replicas into f.
func fleetFlagSet(fs *flag.FlagSet, f *runFlags) {
	f.concurrency = runner.DefaultConcurrency
	fs.Var(&concurrencyFlag{n: &f.concurrency, auto: &f.fleet.auto}, "concurrency",
		"`N` rollouts in flight, or auto[:MAX] (docs/fleets.md)")
	fs.StringVar(&f.fleet.route, "route", string(fleet.Affinity), "with several endpoints, `ROUTE`: affinity (a task's rollouts stay on one endpoint, under a load bound), least-outstanding, round-robin")
	fs.IntVar(&f.fleet.ejectAfter, "eject-after", fleet.DefaultEjectAfter, "with several endpoints, eject one after `N` consecutive failures (connection, 5xx, timeout) until it answers a probe")
	fs.Float64Var(&f.fleet.loadFactor, "load-factor", fleet.DefaultLoadFactor, "affinity's load bound `F`: an endpoint takes new tasks while within F times its share of the requests in flight")
	fs.IntVar(&f.fleet.simReplicas, "sim-replicas", 0, "with --model-url builtin:sim: `N` simulated inference servers (rollout sim --replicas), as a pool")
	f.fleet.serving = servingKnobs(fs, "sim-")
}

// concurrencyFlag is --concurrency: a number, auto or auto:MAX.
type concurrencyFlag struct {
	n    *int
	auto *bool
}

func (c *concurrencyFlag) String() string {
	if c.n == nil {
		return ""
	}
	if *c.auto {
		return "auto:" + strconv.Itoa(*c.n)
	}
	return strconv.Itoa(*c.n)
}

func (c *concurrencyFlag) Set(v string) error {
	if rest, ok := strings.CutPrefix(v, "auto"); ok {
		n := DefaultAutoMax
		if rest != "" {
			m, err := strconv.Atoi(strings.TrimPrefix(rest, ":"))
			if err != nil || !strings.HasPrefix(rest, ":") || m < 1 {
				return fmt.Errorf("want auto or auto:MAX with MAX a whole number >= 1, got %q", v)
			}
			n = m
		}
		*c.n, *c.auto = n, true
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("want a whole number, auto or auto:MAX, got %q", v)
	}
	*c.n, *c.auto = n, false
	return nil
}

// checkModelURLs checks each URL of a --model-url list; builtin:sim and replay:GLOB serve alone.
func checkModelURLs(s string) error {
	urls := strings.Split(s, ",")
	for _, u := range urls {
		if u == "" {
			return badUsage("--model-url %s: an empty URL in the list", s)
		}
		if len(urls) > 1 && (strings.HasPrefix(u, "builtin:") || strings.HasPrefix(u, "replay:")) {
			return badUsage("--model-url %s: %s cannot be one endpoint of several; for several simulated endpoints give --model-url builtin:sim --sim-replicas N", s, u)
		}
		if err := checkModelURL(u); err != nil {
			return err
		}
	}
	return nil
}

// check refuses fleet flags out of range, and --concurrency auto where there is nothing to
// adapt to.
func (f *fleetFlags) check(modelURL string) error {
	if _, err := fleet.ParseRoute(f.route); err != nil {
		return badUsage("--route: %v", err)
	}
	if f.ejectAfter < 1 {
		return badUsage("--eject-after must be at least 1, got %d", f.ejectAfter)
	}
	if f.loadFactor < 1 {
		return badUsage("--load-factor must be at least 1, got %g", f.loadFactor)
	}
	if f.auto && (strings.HasPrefix(modelURL, "builtin:") && f.simReplicas == 0 || strings.HasPrefix(modelURL, "replay:")) {
		return badUsage("--concurrency auto adapts to a model server's latency; %s has none to adapt to (with builtin:sim, give --sim-replicas N)", modelURL)
	}
	if f.simReplicas < 0 {
		return badUsage("--sim-replicas must be >= 0, got %d", f.simReplicas)
	}
	if err := f.serving.Validate(); err != nil {
		return badUsage("--sim-%v", err)
	}
	return nil
}

// configEndpoints reads the endpoints list of a run config file (nil when it has none):
//
//	endpoints:
//	  - {url: http://a:8000/v1, model: Qwen/Qwen3-8B, weight: 2, max-concurrency: 64, api-key-env: A_KEY}
//	  - url: http://b:8000/v1
//
// Each names its URL (required), and may name its model (default --model), weight (default 1),
// max-concurrency (default: none), api-key-env (default OPENAI_API_KEY) and name. A bad entry is
// an error naming FILE:LINE, and so is an api-key-env naming a variable that getenv does not
// have: a key asked for and missing would otherwise send no key at all.
func configEndpoints(path string, getenv func(string) string) (eps []fleet.Endpoint, keyEnvs []string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, badUsage("--config: %v", err)
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil, nil // applyConfig reports a file it cannot read
	}
	top := doc.Content[0]
	at := func(n *yaml.Node, format string, args ...any) error {
		return badUsage("%s:%d: endpoints: %s", path, n.Line, fmt.Sprintf(format, args...))
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "endpoints" {
			continue
		}
		list := top.Content[i+1]
		if list.Kind != yaml.SequenceNode || len(list.Content) == 0 {
			return nil, nil, at(list, "want a list of {url, model, weight, max-concurrency, api-key-env, name}")
		}
		for _, item := range list.Content {
			if item.Kind == yaml.ScalarNode {
				item = &yaml.Node{Kind: yaml.MappingNode, Line: item.Line, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: "url"}, item}}
			}
			if item.Kind != yaml.MappingNode {
				return nil, nil, at(item, "want a URL or {url, model, weight, max-concurrency, api-key-env, name}")
			}
			var ep fleet.Endpoint
			keyEnv := "OPENAI_API_KEY"
			for j := 0; j+1 < len(item.Content); j += 2 {
				k, v := item.Content[j], item.Content[j+1]
				if v.Kind != yaml.ScalarNode {
					return nil, nil, at(v, "%s: want a value", k.Value)
				}
				switch strings.ReplaceAll(k.Value, "_", "-") {
				case "url":
					ep.URL = v.Value
				case "model":
					ep.Model = v.Value
				case "name":
					ep.Name = v.Value
				case "weight":
					w, err := strconv.ParseFloat(v.Value, 64)
					if err != nil || !(w > 0) {
						return nil, nil, at(v, "weight: want a number > 0, got %q", v.Value)
					}
					ep.Weight = w
				case "max-concurrency":
					n, err := strconv.Atoi(v.Value)
					if err != nil || n < 1 {
						return nil, nil, at(v, "max-concurrency: want a whole number >= 1, got %q", v.Value)
					}
					ep.MaxConcurrency = n
				case "api-key-env":
					if v.Value == "" {
						return nil, nil, at(v, "api-key-env: want the name of an environment variable")
					}
					if getenv(v.Value) == "" {
						return nil, nil, at(v, "api-key-env: %s is not set (it holds this endpoint's API key: set it, or drop api-key-env for an endpoint that needs no key)", v.Value)
					}
					keyEnv = v.Value
				default:
					return nil, nil, at(k, "unknown key %q (url, model, weight, max-concurrency, api-key-env, name)", k.Value)
				}
			}
			if ep.URL == "" {
				return nil, nil, at(item, "an endpoint needs a url")
			}
			if err := checkModelURL(ep.URL); err != nil || strings.Contains(ep.URL, ":") && !strings.Contains(ep.URL, "://") {
				return nil, nil, at(item, "url %s: want an http:// or https:// URL such as http://localhost:8000/v1", redact.URL(ep.URL))
			}
			eps = append(eps, ep)
			keyEnvs = append(keyEnvs, keyEnv)
		}
	}
	return eps, keyEnvs, nil
}

// fleetEndpoints are the endpoints of a run's pool: the config file's endpoints list, else the
// --model-url list; nil when the run has one endpoint (no pool).
func fleetEndpoints(f runFlags, getenv func(string) string) []fleet.Endpoint {
	if len(f.fleet.endpoints) > 0 {
		eps := make([]fleet.Endpoint, len(f.fleet.endpoints))
		for i, e := range f.fleet.endpoints {
			e.APIKey = getenv(f.fleet.keyEnvs[i])
			if e.Model == "" {
				e.Model = f.model
			}
			eps[i] = e
		}
		return eps
	}
	urls := strings.Split(f.modelURL, ",")
	if len(urls) < 2 && !(f.fleet.auto && strings.Contains(f.modelURL, "://")) {
		return nil // one endpoint; with --concurrency auto, a pool of one adapts its limit
	}
	eps := make([]fleet.Endpoint, len(urls))
	for i, u := range urls {
		eps[i] = fleet.Endpoint{URL: u, APIKey: getenv("OPENAI_API_KEY")}
	}
	return eps
}

// openPool makes the model client of a pool of endpoints: the pool under the client's retries,
// so that a retry may move to another endpoint.
func openPool(f runFlags, eps []fleet.Endpoint, transport http.RoundTripper, policy retry.Policy) (*fleet.Pool, agent.Model, error) {
	opts := fleet.Options{Route: fleet.Route(f.fleet.route), LoadFactor: f.fleet.loadFactor, EjectAfter: f.fleet.ejectAfter, Transport: transport}
	if f.fleet.auto {
		opts.Adaptive = &fleet.Adaptive{Max: f.concurrency}
	}
	pool, err := fleet.New(eps, opts)
	if err != nil {
		return nil, nil, badUsage("--model-url: %v", err)
	}
	doer := &retry.Doer{Client: &http.Client{Transport: pool, CheckRedirect: retry.NoRedirect}, Policy: policy, AttemptTimeout: f.modelTimeout}
	return pool, pool.Model(agent.NewOpenAIModel(fleet.BaseURL, "", doer, agent.WithMaxAnswerBytes(f.maxModelAnswer))), nil
}

// preflightPool checks every endpoint of a pool as preflightModel checks one.
func preflightPool(ctx context.Context, pool *fleet.Pool, transport http.RoundTripper, name string, secrets []string) error {
	for _, e := range pool.Endpoints() {
		ep, err := agent.ParseEndpoint(e.URL)
		if err != nil {
			return badUsage("--model-url: %v", err)
		}
		client := &http.Client{Transport: agent.QueryTransport(transport, ep.Query), CheckRedirect: retry.NoRedirect}
		if err := preflightModel(ctx, client, ep.Base, e.APIKey, cmp.Or(e.Model, name), secrets); err != nil {
			return err
		}
	}
	return nil
}

// EndpointsFile is the per-endpoint table of a run with a pool, in its output directory.
const EndpointsFile = "endpoints.json"

// printPool prints the per-endpoint table to w (and the simulated servers' counters, with
// --sim-replicas) and writes them, with the health events, to endpoints.json in dir; the
// secrets (keys, URL passwords and query values) an error text may carry are redacted in both.
func printPool(w io.Writer, dir string, pool *fleet.Pool, sims *serving.Fleet, secrets []string) error {
	stats, events := pool.Stats(), pool.Events()
	var served []serving.Stats
	if sims != nil {
		served = sims.Stats()
	}
	var text bytes.Buffer
	text.WriteString("\n")
	if err := fleet.WriteTable(&text, stats, events); err != nil {
		return err
	}
	if sims != nil {
		text.WriteString("\n")
		if err := serving.WriteTable(&text, served); err != nil {
			return err
		}
	}
	data, err := json.MarshalIndent(struct {
		Endpoints []fleet.EndpointStats `json:"endpoints"`
		Events    []fleet.Event         `json:"events"`
		Simulated []serving.Stats       `json:"simulated_servers,omitempty"`
	}{stats, events, served}, "", "  ")
	if err != nil {
		return err
	}
	out := text.String()
	if r := redact.Replacer(secrets); r != nil {
		out, data = r.Replace(out), []byte(r.Replace(string(data)))
	}
	if _, err := io.WriteString(w, out); err != nil {
		return err
	}
	return durable.WriteFileAtomic(filepath.Join(dir, EndpointsFile), append(data, '\n'), 0o644)
}

// summaryEndpoints is the pool's per-endpoint table for summary.json, as a JSON array, its
// names, URLs and model names redacted as printPool redacts them (nil without a pool).
func summaryEndpoints(f fleetFlags) (json.RawMessage, error) {
	if f.pool == nil {
		return nil, nil
	}
	stats := f.pool.Stats()
	if r := redact.Replacer(f.secrets); r != nil {
		for i := range stats {
			s := &stats[i]
			s.Name, s.URL, s.Model = r.Replace(s.Name), r.Replace(s.URL), r.Replace(s.Model)
		}
	}
	data, err := json.Marshal(stats)
	if err != nil {
		return nil, fmt.Errorf("the endpoints' counters: %w", err)
	}
	return data, nil
}

// servingKnobs defines the serving simulator's flags on fs, each named prefix+knob, with the
// defaults of an 8B model on one GPU (serving.Default).
func servingKnobs(fs *flag.FlagSet, prefix string) *serving.Config {
	c := serving.Default
	fs.IntVar(&c.MaxNumSeqs, prefix+"max-num-seqs", c.MaxNumSeqs, "serving simulator: sequences `N` in a replica's batch at most")
	fs.IntVar(&c.MaxQueue, prefix+"max-queue", c.MaxQueue, "serving simulator: requests `N` waiting at most; more get 429 (0: no bound)")
	fs.IntVar(&c.KVCacheTokens, prefix+"kv-cache-tokens", c.KVCacheTokens, "serving simulator: prefix-cache capacity in tokens `N`")
	fs.DurationVar(&c.PrefillPerToken, prefix+"prefill-per-token", c.PrefillPerToken, "serving simulator: prefill cost `D` per uncached prompt token")
	fs.DurationVar(&c.DecodeBase, prefix+"decode-base", c.DecodeBase, "serving simulator: decode step `D` with one sequence")
	fs.DurationVar(&c.DecodePerSeq, prefix+"decode-per-seq", c.DecodePerSeq, "serving simulator: decode step cost `D` added per sequence in the batch")
	fs.Float64Var(&c.Speed, prefix+"speed", c.Speed, "serving simulator: model time runs `X` times faster than the clock")
	return &c
}

// startReplicas serves n serving-simulator replicas of h on loopback ports, each holding at
// most maxConns connections; stop stops them.
func startReplicas(n, maxConns int, h http.Handler, cfg serving.Config) (urls []string, fl *serving.Fleet, stop func(), err error) {
	fl, err = serving.NewFleet(n, h, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	var stops []func()
	stop = func() {
		fl.Close()
		for _, s := range stops {
			s()
		}
	}
	for _, r := range fl.Replicas {
		u, s, err := serveLocal(r, maxConns)
		if err != nil {
			stop()
			return nil, nil, nil, err
		}
		stops = append(stops, s)
		urls = append(urls, u+"/v1")
	}
	return urls, fl, stop, nil
}

// redactURLs is a --model-url list with each URL's credentials redacted (redact.URL).
func redactURLs(list string) string {
	urls := strings.Split(list, ",")
	for i, u := range urls {
		urls[i] = redact.URL(u)
	}
	return strings.Join(urls, ",")
}
