package loadbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/internal/localserve"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// Scenario is one load run: Tasks tasks of a shape, Concurrency rollouts in flight, the
// simulator answering each model call after Latency.
type Scenario struct {
	Name        string
	Tasks       int
	Concurrency int
	Latency     time.Duration
	Shape       TaskShape
	// RSSAt lists completed-rollout counts at which the runner's RSS is sampled (e.g. 10^5).
	RSSAt []int
	// KeepOutput keeps the run's output directory (default: removed after the run).
	KeepOutput bool
}

// maxConns is the --max-conns of the scenario's simulator and resource server: what a server
// of a run at the scenario's concurrency holds.
func (sc Scenario) maxConns() int { return localserve.MaxConnsFor(sc.Concurrency) }

// simArgs are the arguments of the scenario's `rollout sim`.
func (sc Scenario) simArgs(planFile string) []string {
	args := []string{"sim", "--tasks", planFile, "--max-conns", strconv.Itoa(sc.maxConns())}
	if sc.Latency > 0 {
		args = append(args, "--latency", sc.Latency.String())
	}
	return args
}

// serveArgs are the arguments of the scenario's `rollout serve counter`.
func (sc Scenario) serveArgs() []string {
	return []string{"serve", "counter", "--max-conns", strconv.Itoa(sc.maxConns())}
}

// Config is what every scenario shares.
type Config struct {
	Bin string // the rollout binary
	Dir string // work directory: task plans, outputs, logs
	// Poll is how often the simulator's counters and the runner's RSS are sampled (default 100 ms).
	Poll time.Duration
	// Log receives a line per scenario as it runs (nil: none).
	Log io.Writer
	// Profile writes each process's CPU profile (ROLLOUT_CPUPROFILE) to the scenario's
	// directory: runner.pprof, sim.pprof, server.pprof.
	Profile bool
}

// env is the environment of one of the scenario's processes.
func (c Config) env(dir, name string) []string {
	env := os.Environ()
	if c.Profile {
		env = append(env, "ROLLOUT_CPUPROFILE="+filepath.Join(dir, name+".pprof"))
	}
	return env
}

// Sample is one poll during a run.
type Sample struct {
	At       time.Duration // since the runner started
	Calls    int64         // model calls answered so far
	Rollouts int64         // rollouts that got their final answer so far
	RSS      int64         // the runner's resident set, bytes
}

// Result is what a scenario measured.
type Result struct {
	Scenario Scenario
	// Wall is the runner process's lifetime: start, tasks, outputs, exit.
	Wall time.Duration
	// Runner, Sim and Server are the processes' rusage.
	Runner, Sim, Server Usage
	// Rollouts, Scored and Failed come from the run's summary.json; MeanReward and ToolErrors
	// (tool calls that failed: an HTTP error, no answer, a timeout) too.
	Rollouts, Scored, Failed int
	MeanReward               float64
	ToolErrors               int64
	// ModelCalls and ToolCalls were answered by the simulator / asked for by it.
	ModelCalls, ToolCalls int64
	// SteadyCallRate is the model-call rate while between 10% and 90% of the run's calls were
	// answered: the ramp-up and the tail left out. OverallCallRate is ModelCalls / Wall.
	SteadyCallRate, OverallCallRate float64
	// RSSAt is the runner's RSS when Scenario.RSSAt[i] rollouts were done (0: not reached); at
	// the run's last count, the largest over its last percent (see sampleRSS).
	RSSAt []int64
	// Samples are the polls.
	Samples []Sample
}

// Turns is the number of turns: a model call and the tool calls it asked for.
func (r *Result) Turns() int64 { return r.ModelCalls }

// SlotLimit is the highest model-call rate the concurrency allows at the scenario's latency
// (concurrency / latency); 0 when the latency is 0.
func (r *Result) SlotLimit() float64 {
	if r.Scenario.Latency <= 0 {
		return 0
	}
	return float64(r.Scenario.Concurrency) / r.Scenario.Latency.Seconds()
}

// SlotEfficiency is SteadyCallRate / SlotLimit.
func (r *Result) SlotEfficiency() float64 {
	if l := r.SlotLimit(); l > 0 {
		return r.SteadyCallRate / l
	}
	return 0
}

// CPUPerTurn is the runner's CPU time per turn.
func (r *Result) CPUPerTurn() time.Duration {
	if r.ModelCalls == 0 {
		return 0
	}
	return r.Runner.CPU() / time.Duration(r.ModelCalls)
}

// RolloutRate is rollouts per second of the runner's wall time.
func (r *Result) RolloutRate() float64 { return float64(r.Rollouts) / r.Wall.Seconds() }

// RolloutsPerCore is the rollouts one core of the runner's CPU does per second at the
// scenario's model latency: rollouts over the runner's CPU-seconds (0 without CPU).
func (r *Result) RolloutsPerCore() float64 {
	if s := r.Runner.CPU().Seconds(); s > 0 {
		return float64(r.Rollouts) / s
	}
	return 0
}

// Cores is the CPU all three processes used over the runner's wall time, in cores.
func (r *Result) Cores() float64 {
	if r.Wall <= 0 {
		return 0
	}
	return (r.Runner.CPU() + r.Sim.CPU() + r.Server.CPU()).Seconds() / r.Wall.Seconds()
}

// Run runs one scenario: it starts the simulator and the counter server, then the runner with
// the tasks streamed to its stdin, and measures them.
func Run(ctx context.Context, c Config, sc Scenario) (_ *Result, err error) {
	if sc.Tasks < 1 || sc.Concurrency < 1 || sc.Shape.Rounds < 1 {
		return nil, fmt.Errorf("scenario %s: tasks, concurrency and rounds must be >= 1", sc.Name)
	}
	if c.Poll <= 0 {
		c.Poll = 100 * time.Millisecond
	}
	dir := filepath.Join(c.Dir, sc.Name)
	os.RemoveAll(dir)
	if err = os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		// A failed scenario keeps its output, to be looked at.
		if err == nil && !sc.KeepOutput {
			os.RemoveAll(filepath.Join(dir, "out"))
		}
	}()
	// The simulator learns the plan from one task: they all share the prompt.
	planFile := filepath.Join(dir, "plan.jsonl")
	if err := os.WriteFile(planFile, []byte(`{"id":0`+sc.Shape.taskTail()), 0o644); err != nil {
		return nil, err
	}
	sim, err := startServer(ctx, "rollout sim", c.Bin, c.env(dir, "sim"), sc.simArgs(planFile)...)
	if err != nil {
		return nil, err
	}
	simStopped := false
	res := &Result{Scenario: sc}
	defer func() {
		if !simStopped {
			sim.stop()
		}
	}()
	srv, err := startServer(ctx, "rollout serve counter", c.Bin, c.env(dir, "server"), sc.serveArgs()...)
	if err != nil {
		return nil, err
	}
	srvStopped := false
	defer func() {
		if !srvStopped {
			srv.stop()
		}
	}()

	runArgs := []string{"run", "--input", "-", "--out", filepath.Join(dir, "out"),
		"--model-url", sim.URL, "--model", "rollout-sim", "--server", srv.URL,
		"--concurrency", strconv.Itoa(sc.Concurrency), "--max-rounds", strconv.Itoa(sc.Shape.Rounds + 1),
		"--progress-interval", "10s"}
	cmd := exec.CommandContext(ctx, c.Bin, runArgs...)
	cmd.Env = c.env(dir, "runner")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = io.Discard
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	genErr := make(chan error, 1)
	go func() {
		err := WriteTasks(stdin, sc.Tasks, sc.Shape)
		stdin.Close()
		genErr <- err
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	tick := time.NewTicker(c.Poll)
	defer tick.Stop()
	var runErr error
poll:
	for {
		select {
		case runErr = <-exited:
			break poll
		case <-tick.C:
			st, err := getSimStats(sim.URL)
			if err != nil {
				continue
			}
			m, _ := rss(cmd.Process.Pid)
			res.Samples = append(res.Samples, Sample{At: time.Since(start), Calls: st.Answers, Rollouts: st.FinalAnswers, RSS: m})
		}
	}
	res.Wall = time.Since(start)
	res.RSSAt = sampleRSS(res.Samples, sc.RSSAt, sc.Tasks)
	if err := <-genErr; err != nil && runErr == nil {
		runErr = fmt.Errorf("writing tasks: %w", err)
	}
	res.Runner = usageOf(cmd.ProcessState)
	st, err := getSimStats(sim.URL)
	if err != nil {
		return nil, err
	}
	res.ModelCalls, res.ToolCalls = st.Answers, st.ToolCalls
	res.Sim, simStopped = sim.stop(), true
	res.Server, srvStopped = srv.stop(), true
	if runErr != nil {
		return nil, fmt.Errorf("scenario %s: rollout run: %v\n%s", sc.Name, runErr, tail(stderr.String(), 2000))
	}
	sum, err := rundir.ReadSummary(filepath.Join(dir, "out"))
	if err != nil {
		return nil, fmt.Errorf("scenario %s: summary: %v", sc.Name, err)
	}
	res.Rollouts, res.Scored, res.Failed, res.MeanReward, res.ToolErrors = sum.Rollouts, sum.Scored, sum.Failed, sum.MeanReward, sum.ToolErrors
	res.OverallCallRate = float64(res.ModelCalls) / res.Wall.Seconds()
	res.SteadyCallRate = steadyRate(res.Samples, int64(sc.Tasks*sc.Shape.Rounds))
	if res.SteadyCallRate == 0 {
		res.SteadyCallRate = res.OverallCallRate
	}
	if err := res.check(); err != nil {
		return res, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	return res, nil
}

// check tells whether the run did the work it was given: a benchmark of a broken run is no
// benchmark.
func (r *Result) check() error {
	sc := r.Scenario
	var errs []error
	if r.Rollouts != sc.Tasks || r.Failed != 0 || r.MeanReward != 1 {
		errs = append(errs, fmt.Errorf("%d rollouts of %d tasks, %d failed, mean reward %g (want all, 0, 1)", r.Rollouts, sc.Tasks, r.Failed, r.MeanReward))
	}
	if r.ToolErrors != 0 {
		errs = append(errs, fmt.Errorf("%d tool calls failed (an HTTP error, no answer or a timeout)", r.ToolErrors))
	}
	if want := int64(sc.Tasks * sc.Shape.Rounds); r.ModelCalls != want {
		errs = append(errs, fmt.Errorf("%d model calls, want %d", r.ModelCalls, want))
	}
	if want := int64(sc.Tasks * (sc.Shape.Rounds - 1)); r.ToolCalls != want {
		errs = append(errs, fmt.Errorf("%d tool calls, want %d", r.ToolCalls, want))
	}
	return errors.Join(errs...)
}

// lastWindow is the part of a run, from its end back, over which the RSS at the run's last
// count is the largest sample.
const lastWindow = 0.01

// sampleRSS is the runner's RSS at each count of at, from the samples (0: never reached, or no
// RSS read): the first sample with that many rollouts done; at the run's last count (tasks or
// more), the largest of the samples from (1-lastWindow)*tasks rollouts up to that first one,
// since the sample at the end can fall after the runner freed its memory for the end of the
// run (a busy machine polls late) and so show the memory shrinking.
func sampleRSS(samples []Sample, at []int, tasks int) []int64 {
	out := make([]int64, len(at))
	for i, k := range at {
		from := int64(k)
		if k >= tasks {
			from = int64(math.Ceil(float64(k) * (1 - lastWindow)))
		}
		for _, s := range samples {
			if s.Rollouts < from || s.RSS <= 0 {
				continue
			}
			out[i] = max(out[i], s.RSS)
			if s.Rollouts >= int64(k) {
				break
			}
		}
		if out[i] > 0 && !reached(samples, k) {
			out[i] = 0
		}
	}
	return out
}

// reached tells whether a sample had k rollouts done.
func reached(samples []Sample, k int) bool {
	return len(samples) > 0 && samples[len(samples)-1].Rollouts >= int64(k)
}

// steadyRate is the call rate between the samples where 10% and 90% of total calls were done.
func steadyRate(samples []Sample, total int64) float64 {
	lo, hi := -1, -1
	for i, s := range samples {
		if lo < 0 && s.Calls >= total/10 {
			lo = i
		}
		if s.Calls >= total*9/10 {
			hi = i
			break
		}
	}
	if lo < 0 || hi <= lo {
		return 0
	}
	d := samples[hi].At - samples[lo].At
	if d <= 0 {
		return 0
	}
	return float64(samples[hi].Calls-samples[lo].Calls) / d.Seconds()
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
