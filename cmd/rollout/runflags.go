package main

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/runner"
	"github.com/rollout-dev/rollout/pkg/servers/store"
	"github.com/rollout-dev/rollout/pkg/sim"
	"github.com/rollout-dev/rollout/pkg/toolclient"
)

// serverFlags collects repeated --server URL | NAME=URL.
type serverFlags []string

func (s *serverFlags) String() string     { return strings.Join(*s, ",") }
func (s *serverFlags) Set(v string) error { *s = append(*s, v); return nil }

type runFlags struct {
	input, out, modelURL, model, jsonlOut, arm string
	arms, steps, toolMode                      string
	sessionStore                               string
	sessionTTL                                 time.Duration
	servers                                    serverFlags
	concurrency, repeats, limit                int
	maxRounds, maxFailedRounds, maxTokens      int
	maxToolCalls                               int
	retries                                    int
	rolloutTimeout, modelTimeout, toolTimeout  time.Duration
	drainTimeout, progressInterval             time.Duration
	temperature                                float64
	seed                                       int64
	strict, overwrite, quiet, noPreflight      bool
	waitReady                                  time.Duration // --wait-ready: how long the preflight waits for endpoints to come up
	resume, force, retryFailed                 bool
	endSessions                                bool
	captureTokens                              bool
	retryBudget                                int
	maxModelAnswer                             int64
	maxToolResult, maxToolBytes                int64 // maxToolBytes: toolBytesPerResult × maxToolResult
	failOnError                                failureLimit
	earlyStop                                  int
	resumeAuto                                 bool
	shardArg                                   string
	shard                                      runner.Shard
	claims                                     int           // --shard claim/M: M
	claimStore                                 string        // --claim-store
	claimLease                                 time.Duration // --claim-lease
	metricsAddr                                string
	fleet                                      fleetFlags
	ctx                                        contextFlags
	request                                    requestFlags
	limitFrac                                  float64  // --limit as a fraction, until resolveSelection
	sampleIDs                                  []string // --sample-id
	ids                                        map[string]bool
}

// toolBytesPerResult is how many --max-tool-result a rollout's tool results may hold in all
// (16 MiB at the default of 1 MiB).
const toolBytesPerResult = agent.DefaultMaxToolBytes / toolclient.DefaultMaxToolResultBytes

// parseRunFlags reads rollout run's flags from a --config file, the environment (ROLLOUT_*)
// and args, each overriding the one before; with --resume, the flags not given come from the
// run's manifest. It returns the flags, the simulator's options, and the arms and workflow
// steps of --config or of the run resumed.
func parseRunFlags(args []string, e env) (f runFlags, simOptions func() (sim.Options, error), configArms []runner.Arm, resumeSteps *agent.Workflow, err error) {
	fs, modelURLFlag, simOptions := runFlagSet(&f, e)
	// A config file sets the flags first; the command line overrides it.
	if path, err := configArg(args); err != nil {
		return f, nil, nil, nil, err
	} else if path != "" {
		if configArms, err = applyConfig(fs, path); err != nil {
			return f, nil, nil, nil, err
		}
		if f.fleet.endpoints, f.fleet.keyEnvs, err = configEndpoints(path, e.getenv); err != nil {
			return f, nil, nil, nil, err
		}
	}
	// The environment (ROLLOUT_CONCURRENCY=8 ...) overrides the config file; the command line
	// overrides both.
	modelURLFlag.given = false
	if err := applyEnv(fs, e.getenv); err != nil {
		return f, nil, nil, nil, err
	}
	modelURLFlag.given = false
	if askedHelpAll(args) {
		runHelp.writeAll(e.stdout, fs)
		return f, nil, nil, nil, errHelp
	}
	if err := parseFlags(fs, args, e); err != nil {
		return f, nil, nil, nil, err
	}
	if f.waitReady < 0 {
		return f, nil, nil, nil, badUsage("--wait-ready %s: want a duration of 0 or more (10m: wait up to ten minutes)", f.waitReady)
	}
	if strings.HasPrefix(f.shardArg, claimPrefix) {
		f.resume = false // each claimed shard resumes its own directory
	} else if f.resumeAuto && !f.overwrite {
		f.resume = holdsRun(f.out)
	}
	if f.resume && !f.overwrite {
		arms, steps, err := resumeDefaults(fs, f.out)
		if err != nil {
			return f, nil, nil, nil, err
		}
		if configArms == nil {
			configArms = arms
		}
		resumeSteps = steps
	}
	if fs.NArg() > 0 {
		return f, nil, nil, nil, badUsage("run: unexpected argument %q", fs.Arg(0))
	}
	if err := f.resolveShard(e.getenv); err != nil {
		return f, nil, nil, nil, err
	}
	if len(f.fleet.endpoints) > 0 {
		if modelURLFlag.given {
			return f, nil, nil, nil, badUsage("--model-url: the config file lists the endpoints; give them there or with --model-url, not both")
		}
		urls := make([]string, len(f.fleet.endpoints))
		for i, ep := range f.fleet.endpoints {
			urls[i] = ep.URL
		}
		f.modelURL = strings.Join(urls, ",")
	}
	if err := f.check(); err != nil {
		return f, nil, nil, nil, err
	}
	if f.ids, err = resolveSelection(&f, e.stderr); err != nil {
		return f, nil, nil, nil, err
	}
	return f, simOptions, configArms, resumeSteps, nil
}

// runFlagSet defines rollout run's flags into f, with their defaults from the environment
// (OPENAI_BASE_URL, ROLLOUT_MODEL); it returns --model-url's flag (given once) and the
// simulator's options as the --sim-* flags set them.
func runFlagSet(f *runFlags, e env) (fs *flag.FlagSet, modelURLFlag *onceFlag, simOptions func() (sim.Options, error)) {
	fs = newFlagSet("rollout run", e, runHelp)
	fs.StringVar(&f.input, "input", "", "task `FILE`, NeMo Gym JSONL (.gz is read as gzip; - is stdin)")
	fs.StringVar(&f.out, "out", "out", "output `DIR` of the run")
	f.modelURL = e.getenv("OPENAI_BASE_URL")
	modelURLFlag = &onceFlag{v: &f.modelURL, list: true}
	fs.Var(modelURLFlag, "model-url", "API base `URL` (…/v1), builtin:sim or replay:GLOB; repeated: a pool")
	fs.StringVar(&f.model, "model", e.getenv("ROLLOUT_MODEL"), "model `NAME` sent to the endpoint")
	fs.Var(&f.servers, "server", "resource server `URL`, NAME=URL (by agent_ref.name), builtin:NAME")
	fleetFlagSet(fs, f)
	fs.IntVar(&f.repeats, "num-repeats", 1, "`N` rollouts per task (repeated as aabbcc)")
	selectFlags(fs, f)
	fs.IntVar(&f.maxRounds, "max-rounds", agent.DefaultMaxRounds, "most model calls (`N`) per rollout")
	fs.IntVar(&f.maxFailedRounds, "max-failed-rounds", agent.DefaultMaxFailedRounds, "end as tool_error after `N` rounds of failed tool calls")
	fs.IntVar(&f.maxToolCalls, "max-tool-calls", agent.DefaultMaxToolCalls, "most tool calls (`N`) in one answer; more: invalid_output")
	fs.IntVar(&f.maxTokens, "max-tokens", 0, "most tokens (`N`) per model call (0: the rows' max_output_tokens)")
	fs.Float64Var(&f.temperature, "temperature", -1, "sampling temperature `T`, over the rows' (-1: the rows')")
	fs.Int64Var(&f.seed, "seed", 0, "base `N` of the per-(task, repeat) seeds sent to the model")
	fs.IntVar(&f.retryBudget, "retry-budget", retry.DefaultBudget, "retries (`N`) of one rollout in all (-1: no budget)")
	fs.Int64Var(&f.maxModelAnswer, "max-model-answer", agent.DefaultMaxModelAnswerBytes, "largest model answer read (`BYTES`)")
	fs.Int64Var(&f.maxToolResult, "max-tool-result", toolclient.DefaultMaxToolResultBytes, "largest tool result `BYTES` kept (16x: a rollout's)")
	fs.IntVar(&f.retries, "retries", retry.DefaultPolicy.MaxAttempts-1, "retries (`N`) of a call on 429, 5xx and connection errors")
	fs.DurationVar(&f.rolloutTimeout, "rollout-timeout", 10*time.Minute, "deadline `D` of one rollout, seed to verify (0: none)")
	fs.DurationVar(&f.modelTimeout, "model-timeout", 5*time.Minute, "deadline `D` of one model request attempt (0: none)")
	fs.DurationVar(&f.toolTimeout, "tool-timeout", time.Minute, "deadline `D` of one resource-server call (0: none)")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", runner.DefaultDrainTimeout, "after Ctrl-C, how long (`D`) running rollouts may finish")
	fs.DurationVar(&f.progressInterval, "progress-interval", 5*time.Second, "status line period `D` off a terminal")
	fs.StringVar(&f.sessionStore, "session-store", "memory", "builtin: servers' `STORE`: memory or redis://HOST:PORT/DB")
	fs.DurationVar(&f.sessionTTL, "session-ttl", store.DefaultTTL, "builtin: servers drop a session `D` after its last write")
	fs.BoolVar(&f.endSessions, "end-sessions", false, "POST /end_session after verify (always to builtin: and rollout serve)")
	fs.BoolVar(&f.captureTokens, "capture-tokens", false, "keep each model call's token ids and log-probs in trajectories.jsonl")
	fs.StringVar(&f.jsonlOut, "jsonl-out", "", "NeMo Gym-style records to `FILE` too (if it exists: only with --overwrite)")
	fs.StringVar(&f.arms, "arms", "", "policy `ARMS` run on every task: single, multi, workflow, or a list")
	fs.StringVar(&f.steps, "steps", "", "the workflow arm's steps `FILE` (data/workflow.steps.json)")
	fs.StringVar(&f.toolMode, "tool-mode", agent.ToolModeNative, "`MODE`: native tool calling, or json answers")
	fs.StringVar(&f.arm, "arm", runner.DefaultArm, "the arm's `NAME` in the records, with one multi arm")
	fs.BoolVar(&f.strict, "strict", false, "refuse to start if a row is malformed (else: bad_task records)")
	fs.BoolVar(&f.overwrite, "overwrite", false, "replace the results of an earlier run in --out")
	shardFlags(fs, f)
	metricsFlag(fs, &f.metricsAddr)
	fs.BoolVar(&f.force, "force", false, "with --resume: resume though the input or results' flags differ")
	fs.BoolVar(&f.retryFailed, "retry-failed", false, "with --resume: run the failed rollouts again too (all but bad_task)")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress on stderr")
	fs.BoolVar(&f.noPreflight, "no-preflight", false, "skip the endpoint, model and server checks")
	fs.DurationVar(&f.waitReady, "wait-ready", 0, "let the preflight wait up to `D` for endpoints not up yet (0: once)")
	f.failOnError = failureLimit{0.05}
	fs.Var(&f.failOnError, "fail-on-error", "exit 4 past this failed `RATE` (<1) or count")
	fs.IntVar(&f.earlyStop, "early-stop", 20, "exit 4 when the first `N` rollouts all fail alike (0: never)")
	f.ctx.define(fs)
	f.request.define(fs)
	simOptions = simKnobs(fs, "sim-")
	fs.String("config", "", "a YAML `FILE` of flags by name, and arms")
	return fs, modelURLFlag, simOptions
}

// check refuses missing and out-of-range flags, a --model-url of no known form and an
// --input that cannot be run.
func (f *runFlags) check() error {
	if f.input == "" {
		return badUsage("run: --input FILE is required")
	}
	if f.maxToolResult < 1 || f.maxToolResult > toolclient.DefaultMaxBodyBytes {
		return badUsage("run: --max-tool-result %d: want 1 to %d bytes", f.maxToolResult, toolclient.DefaultMaxBodyBytes)
	}
	f.maxToolBytes = toolBytesPerResult * f.maxToolResult
	if f.modelURL == "" {
		return badUsage("run: --model-url is required (or set OPENAI_BASE_URL)")
	}
	if len(f.servers) == 0 {
		return badUsage("run: --server URL is required")
	}
	if f.retries < 0 {
		return badUsage("run: --retries must be >= 0")
	}
	if f.concurrency < 1 {
		return badUsage("run: --concurrency must be at least 1, got %d", f.concurrency)
	}
	if err := checkModelURLs(f.modelURL); err != nil {
		return err
	}
	if err := f.fleet.check(f.modelURL); err != nil {
		return err
	}
	if err := checkInput(f.input, f.modelURL == "builtin:sim"); err != nil {
		return err
	}
	if f.earlyStop < 0 {
		return badUsage("run: --early-stop must be >= 0")
	}
	return nil
}

// onceFlag is a string flag that may be given once: a second value is refused, never silently
// the last one. Its default (from the environment) and a config file's value may be overridden
// once on the command line (the caller clears given after the config file is read).
type onceFlag struct {
	v     *string
	given bool
	what  string // "one model endpoint"
	// list: a value given again is added to the list (a comma-separated one) instead.
	list bool
}

func (o *onceFlag) String() string {
	if o.v == nil {
		return ""
	}
	return *o.v
}

func (o *onceFlag) Set(v string) error {
	if o.given && o.list {
		*o.v += "," + v
		return nil
	}
	if o.given {
		return fmt.Errorf("given twice (%s, then %s): rollout run takes %s", *o.v, v, o.what)
	}
	*o.v, o.given = v, true
	return nil
}

// checkModelURL refuses a --model-url that is not http(s)://HOST..., builtin:sim or replay:GLOB.
func checkModelURL(s string) error {
	if strings.HasPrefix(s, "replay:") || strings.HasPrefix(s, "builtin:") {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		hint := ""
		if !strings.Contains(s, "://") {
			hint = fmt.Sprintf(" (did you mean http://%s?)", s)
		}
		return badUsage("--model-url %s: want an http:// or https:// URL such as http://localhost:8000/v1, builtin:sim or replay:GLOB%s", s, hint)
	}
	return nil
}

// checkInput refuses an --input that is missing or has no task, and, with the simulator (which
// reads the file for its plans before the run reads it again), one that is not a regular file.
func checkInput(path string, sim bool) error {
	if path == "-" {
		return nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return badUsage("--input %s: %v", path, errors.Unwrap(err))
	}
	if sim && !st.Mode().IsRegular() {
		return badUsage("--input %s: the simulator (--model-url builtin:sim) reads the tasks' plans before the run reads them, so --input must be a regular file, not a pipe or a device", path)
	}
	if !st.Mode().IsRegular() {
		return nil
	}
	n, err := dataset.Count(path)
	if err != nil {
		return badUsage("--input %s: %v", path, err)
	}
	if n == 0 {
		return badUsage("--input %s: no tasks", path)
	}
	return nil
}

// runHelp is rollout run --help.
var runHelp = commandHelp{
	usage: "rollout run --input FILE --model-url URL --model NAME --server URL [flags]\n       rollout run --resume --out DIR [flags]",
	about: `Runs every task of a NeMo Gym JSONL file as multi-step tool-using rollouts: the model behind an
OpenAI-compatible API calls the tools of the task's resource server, which verifies and rewards.
First it checks that the endpoint lists --model and every server answers. Results: --out's
journal.jsonl, rollouts.parquet, trajectories.jsonl, summary.json; the summary on stdout.`,
	groups: []flagGroup{
		{title: "Input and output", names: []string{"input", "out", "limit", "sample-id", "num-repeats", "strict", "overwrite", "resume", "force", "retry-failed", "jsonl-out", "config", "shard", "claim-store", "claim-lease"}},
		{title: "Model", names: []string{"model-url", "model", "tool-mode", "max-model-answer", "capture-tokens"}},
		{title: "Request options (members of every model request, over the row's; --help-all describes each)",
			names: append([]string{"temperature", "max-tokens", "seed"}, requestFlagNames...), compact: true},
		{title: "Resource servers", names: []string{"server", "session-store", "session-ttl", "end-sessions"}},
		{title: "Policy", names: []string{"arms", "arm", "steps", "max-rounds", "max-failed-rounds", "max-tool-calls", "max-tool-result", "context", "briefing-prompt", "degrade"}},
		{title: "Run control", names: []string{"concurrency", "rollout-timeout", "model-timeout", "tool-timeout", "retries", "retry-budget", "drain-timeout",
			"no-preflight", "wait-ready", "early-stop", "fail-on-error", "quiet", "progress-interval", "metrics-addr"}},
		{title: "Endpoint pool (several --model-url, or endpoints: in --config; docs/fleets.md)", names: []string{"route", "load-factor", "eject-after", "sim-replicas"},
			compact: true},
		{title: "Simulator (with --model-url builtin:sim; rollout sim --help describes each knob)", names: []string{"sim-profile", "sim-seed", "sim-latency",
			"sim-wrong-argument", "sim-skip-step", "sim-premature-answer", "sim-malformed-tool-call", "sim-http-429", "sim-http-500",
			"sim-connection-reset", "sim-hang", "sim-retry-after", "sim-tool-count-error-slope", "sim-tool-count-baseline",
			"sim-max-num-seqs", "sim-max-queue", "sim-kv-cache-tokens", "sim-prefill-per-token", "sim-decode-base", "sim-decode-per-seq", "sim-speed",
			"sim-context-limit", "sim-context-error-slope", "sim-distance-error-slope", "sim-briefing-drop"},
			brief: "--sim-profile NAME picks an error profile (rollout sim --help lists them); a knob overrides it."},
	},
	examples: []string{
		"rollout run --input data/extraction.jsonl --model-url builtin:sim --server builtin:extraction",
		"rollout run --input tasks.jsonl --model-url http://localhost:8000/v1 --model Qwen/Qwen3-8B \\",
		"    --server http://localhost:8001 --num-repeats 4 --out out/qwen",
	},
	environment: []string{
		"OPENAI_BASE_URL   default of --model-url",
		"OPENAI_API_KEY    sent to the model endpoint as a Bearer token; never written anywhere",
		"ROLLOUT_<FLAG>    any flag (ROLLOUT_NUM_REPEATS=4), over --config; the command line wins",
	},
	exitCodes: slices.DeleteFunc(slices.Clone(exitCodeHelp), func(l string) bool { return strings.HasPrefix(l, "3 ") }),
}
