package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/rollout-dev/rollout/internal/localserve"
	"github.com/rollout-dev/rollout/pkg/sim"
	"github.com/rollout-dev/rollout/pkg/sim/serving"
)

// taskFiles collects repeated --tasks FILE.
type taskFiles []string

func (t *taskFiles) String() string     { return strings.Join(*t, ",") }
func (t *taskFiles) Set(v string) error { *t = append(*t, v); return nil }

// simKnobs registers the simulator's knobs on fs, each flag named prefix+knob, and returns a
// function that builds the options once fs is parsed: the profile's values, overridden by the
// knob flags that were given.
func simKnobs(fs *flag.FlagSet, prefix string) func() (sim.Options, error) {
	var o sim.Options
	profile := fs.String(prefix+"profile", "none", "simulator error profile: "+strings.Join(sim.ProfileNames(), ", ")+" (knob flags override it)")
	fs.Int64Var(&o.Seed, prefix+"seed", 0, "simulator seed: the same seed and requests give the same answers")
	fs.Var(&o.Latency, prefix+"latency", "simulated latency per model call: `D`, uniform:MIN-MAX, normal:MEAN,STDDEV or exp:MEAN")
	fs.Float64Var(&o.WrongArgument, prefix+"wrong-argument", 0, "probability per round that one argument of a planned call is wrong")
	fs.Float64Var(&o.SkipStep, prefix+"skip-step", 0, "probability per round that one planned call is skipped")
	fs.Float64Var(&o.PrematureAnswer, prefix+"premature-answer", 0, "probability per round of answering before the plan is done")
	fs.Float64Var(&o.MalformedToolCall, prefix+"malformed-tool-call", 0, "probability per round that a tool call's arguments are not valid JSON")
	fs.Float64Var(&o.HTTP429, prefix+"http-429", 0, "probability per request of an HTTP 429 (a retry draws again)")
	fs.Float64Var(&o.HTTP500, prefix+"http-500", 0, "probability per request of an HTTP 500 (a retry draws again)")
	fs.Float64Var(&o.ConnectionReset, prefix+"connection-reset", 0, "probability per request that the connection is closed with a TCP RST instead of an answer (a retry draws again)")
	fs.Float64Var(&o.Hang, prefix+"hang", 0, "probability per request of no answer until the client gives up (a retry draws again)")
	fs.DurationVar(&o.RetryAfter, prefix+"retry-after", 0, "Retry-After sent with an injected 429 (0: none)")
	fs.Float64Var(&o.ToolCountErrorSlope, prefix+"tool-count-error-slope", 0, "extra wrong-argument probability per tool offered beyond --"+prefix+"tool-count-baseline (models real models erring more when offered more tools; 0: off)")
	fs.IntVar(&o.ToolCountBaseline, prefix+"tool-count-baseline", 0, "tools offered that cost nothing under --"+prefix+"tool-count-error-slope")
	fs.IntVar(&o.ContextLimit, prefix+"context-limit", 0, "the simulated model's context in `TOKENS`: a longer request is refused as vLLM refuses it (0: no limit)")
	fs.Float64Var(&o.ContextErrorSlope, prefix+"context-error-slope", 0, "extra wrong-argument probability per 1000 prompt tokens (a model of a model: 0: off)")
	fs.Float64Var(&o.DistanceErrorSlope, prefix+"distance-error-slope", 0, "extra wrong-argument probability per round between reading a value and using it (0: off)")
	fs.Float64Var(&o.BriefingDrop, prefix+"briefing-drop", 0, "probability that the simulator's briefing leaves out a fact")
	return func() (sim.Options, error) {
		base, err := sim.Profile(*profile)
		if err != nil {
			return sim.Options{}, err
		}
		fs.Visit(func(f *flag.Flag) {
			switch strings.TrimPrefix(f.Name, prefix) {
			case "seed":
				base.Seed = o.Seed
			case "latency":
				base.Latency = o.Latency
			case "wrong-argument":
				base.WrongArgument = o.WrongArgument
			case "skip-step":
				base.SkipStep = o.SkipStep
			case "premature-answer":
				base.PrematureAnswer = o.PrematureAnswer
			case "malformed-tool-call":
				base.MalformedToolCall = o.MalformedToolCall
			case "http-429":
				base.HTTP429 = o.HTTP429
			case "http-500":
				base.HTTP500 = o.HTTP500
			case "connection-reset":
				base.ConnectionReset = o.ConnectionReset
			case "hang":
				base.Hang = o.Hang
			case "retry-after":
				base.RetryAfter = o.RetryAfter
			case "tool-count-error-slope":
				base.ToolCountErrorSlope = o.ToolCountErrorSlope
			case "tool-count-baseline":
				base.ToolCountBaseline = o.ToolCountBaseline
			case "context-limit":
				base.ContextLimit = o.ContextLimit
			case "context-error-slope":
				base.ContextErrorSlope = o.ContextErrorSlope
			case "distance-error-slope":
				base.DistanceErrorSlope = o.DistanceErrorSlope
			case "briefing-drop":
				base.BriefingDrop = o.BriefingDrop
			}
		})
		if err := base.Validate(); err != nil {
			return sim.Options{}, err
		}
		return base, nil
	}
}

// simArgs are rollout sim's arguments.
type simArgs struct {
	addr     string
	tasks    taskFiles
	opts     sim.Options
	replicas int             // --replicas: simulated inference servers (0: the plain simulator)
	maxConns int             // --max-conns of each server
	serving  *serving.Config // their serving model
}

// parseSim reads rollout sim's arguments, checking them.
func parseSim(args []string, e env) (a simArgs, err error) {
	fs := newFlagSet("rollout sim", e, commandHelp{
		usage: "rollout sim [--tasks FILE]... [--addr 127.0.0.1:PORT] [--sim-profile NAME] [--sim-* knobs]",
		about: `Serves rollout's model SIMULATOR (not a model): an OpenAI-compatible Chat Completions
endpoint at http://ADDR/v1 that plays each task's reference_plan, with seeded latency
and injected errors. The knobs are the --sim-* flags of rollout run.
With --replicas N it serves N simulated inference servers instead, each a model (not a
measurement) of vLLM serving an 8B model on one GPU: continuous batching, prefill per
uncached token, an LRU prefix cache, a queue and 429; GET /stats reports each one.`,
		examples: []string{"rollout sim --tasks data/extraction.jsonl --sim-profile realistic --sim-seed 1 --addr 127.0.0.1:8000",
			"rollout sim --tasks data/extraction.jsonl --replicas 4 --addr 127.0.0.1:8000   # :8000 to :8003"},
	})
	fs.StringVar(&a.addr, "addr", "127.0.0.1:0", "listen `ADDR` (loopback unless told otherwise)")
	fs.Var(&a.tasks, "tasks", "task `FILE` whose reference plans the simulator plays (repeatable; without it every conversation gets random schema-valid tool calls)")
	// The knobs have the names they have in rollout run (--sim-seed, --sim-latency, ...); the
	// names without sim- that rollout sim took before still work.
	knobs := simKnobs(fs, "sim-")
	fs.IntVar(&a.replicas, "replicas", 0, "serve `N` simulated inference servers (continuous batching, prefix cache, queue, 429), each on its own port (--addr's, then the next ones), with GET /stats (0: the plain simulator)")
	a.serving = servingKnobs(fs, "")
	maxConnsFlag(fs, &a.maxConns)
	legacy := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if old, ok := strings.CutPrefix(f.Name, "sim-"); ok {
			legacy[old] = f.Name
		}
	})
	args = renameFlags(args, legacy)
	if err := parseFlags(fs, args, e); err != nil {
		return a, err
	}
	if fs.NArg() > 0 {
		return a, badUsage("sim: unexpected argument %q (task files go after --tasks)", fs.Arg(0))
	}
	if err := checkMaxConns("sim", a.maxConns); err != nil {
		return a, err
	}
	if a.opts, err = knobs(); err != nil {
		return a, usageError{err}
	}
	return a, nil
}

// cmdSim serves the model simulator until interrupted.
func cmdSim(ctx context.Context, args []string, e env) error {
	a, err := parseSim(args, e)
	if err != nil {
		return err
	}
	tasks, opts, addr := a.tasks, a.opts, &a.addr
	ts, err := sim.LoadTasks(tasks...)
	if err != nil {
		return usageError{err}
	}
	for _, w := range ts.Warnings() {
		fmt.Fprintf(e.stderr, "rollout: sim: %s\n", w)
	}
	s, err := sim.New(ts, opts)
	if err != nil {
		return usageError{err}
	}
	if a.replicas > 0 {
		return serveReplicas(ctx, e, *addr, a.replicas, a.maxConns, s, *a.serving)
	}
	ln, err := localserve.Listen(*addr, a.maxConns)
	if err != nil {
		return badUsage("sim: %v", err)
	}
	fmt.Fprintf(e.stdout, "http://%s/v1\n", ln.Addr())
	fmt.Fprintf(e.stderr, "rollout: simulator on http://%s/v1 with %d tasks (%d with a plan); Ctrl-C to stop\n", ln.Addr(), ts.Len(), ts.Plans())
	err = serveUntilDone(ctx, ln, s)
	st := s.Stats()
	in := st.Injected
	fmt.Fprintf(e.stderr, "rollout: simulator served %d requests: %d answers; injected %d HTTP 429, %d HTTP 500, %d connection resets, %d hangs, %d wrong arguments, %d skipped steps, %d premature answers, %d malformed tool calls\n",
		st.Requests, st.Answers, in.HTTP429, in.HTTP500, in.ConnectionReset, in.Hang, in.WrongArgument, in.SkipStep, in.PrematureAnswer, in.MalformedToolCall)
	return err
}

// serveReplicas serves n serving-simulator replicas of s until ctx ends, replica i on addr's
// port + i (or each on a free port when addr's is 0), and prints their base URLs on stdout.
func serveReplicas(ctx context.Context, e env, addr string, n, maxConns int, s http.Handler, cfg serving.Config) error {
	if err := cfg.Validate(); err != nil {
		return badUsage("sim: --%v", err)
	}
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return badUsage("sim: --addr %s: %v", addr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return badUsage("sim: --addr %s: the port is not a number", addr)
	}
	fl, err := serving.NewFleet(n, s, cfg)
	if err != nil {
		return usageError{err}
	}
	defer fl.Close()
	var lns []net.Listener
	for i := range n {
		p := 0
		if port != 0 {
			p = port + i
		}
		ln, err := localserve.Listen(net.JoinHostPort(host, strconv.Itoa(p)), maxConns)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return badUsage("sim: replica %d: %v", i, err)
		}
		lns = append(lns, ln)
		fmt.Fprintf(e.stdout, "http://%s/v1\n", ln.Addr())
	}
	fmt.Fprintf(e.stderr, "rollout: %d simulated inference servers (max-num-seqs %d, kv-cache-tokens %d, speed %g); GET /stats on each; Ctrl-C to stop\n", n, cfg.MaxNumSeqs, cfg.KVCacheTokens, cfg.Speed)
	var g sync.WaitGroup
	errs := make([]error, n)
	for i, ln := range lns {
		g.Add(1)
		go func() {
			defer g.Done()
			errs[i] = serveUntilDone(ctx, ln, fl.Replicas[i])
		}()
	}
	g.Wait()
	for i, st := range fl.Stats() {
		fmt.Fprintf(e.stderr, "rollout: replica %d: %d requests, %d rejected (429), prefix-cache hit rate %.3f, %d prefilled and %d cached tokens\n",
			i, st.Requests, st.Rejected, st.HitRate, st.PrefilledTokens, st.CachedTokens)
	}
	return errors.Join(errs...)
}
