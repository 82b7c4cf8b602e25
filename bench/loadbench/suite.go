package loadbench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/pkg/rundir"
)

// SuiteOptions size the suite.
type SuiteOptions struct {
	// Scale multiplies the task counts of every load scenario (1: the full suite, 10^6 tasks
	// in the memory scenario; 0.01 for a quick look).
	Scale float64
	// Phases to run (empty: all): gobench, ceiling, floor, load, zero, rounds, size, concurrency,
	// inflight, million.
	Phases []string
	// BenchTime is go test's -benchtime for the Go benchmarks ("": go's default).
	BenchTime string
	// GoBenchPackages are the packages whose Go benchmarks run (default ./pkg/...).
	GoBenchPackages []string
}

func (o SuiteOptions) has(phase string) bool {
	if len(o.Phases) == 0 {
		return true
	}
	for _, p := range o.Phases {
		if p == phase {
			return true
		}
	}
	return false
}

func (o SuiteOptions) n(full int) int { return max(1, int(float64(full)*o.Scale)) }

// Suite is everything `make bench` measures.
type Suite struct {
	Started  time.Time
	Took     time.Duration
	Machine  Machine
	Options  SuiteOptions
	GoBench  []GoBench
	Ceiling  *Ceiling
	Floor    *Floor
	Load     []*Result // 100 ms latency, 3 rounds, concurrency 64, 256, 1024; then 1024 at 1 s
	Zero     *Result   // zero latency, 3 rounds, concurrency 64
	Rounds   []*Result // zero latency, concurrency 64, rounds 1, 3, 10, 30
	Size     []*Result // zero latency, concurrency 64, 3 rounds, prompt 0 to 64 KiB
	Conc     []*Result // 100 ms latency, 3 rounds, concurrency 64 to 4096
	Million  *Result   // 10^6 one-round tasks, concurrency 1024, zero latency
	InFlight []*Result // 1 s latency, 3 rounds, concurrency 1 (the base), 1024 and 4096 (16 and 64 at scale 0.01)
	Resume   *Timing   // rundir.Compact over the million scenario's output
	Finalize *Timing   // rundir.Finish over the million scenario's output
}

// Timing is an in-process measurement over a run's output.
type Timing struct {
	Records int
	Took    time.Duration
	Note    string
}

// Rate is records per second.
func (t *Timing) Rate() float64 { return float64(t.Records) / t.Took.Seconds() }

// Machine describes where the suite ran.
type Machine struct {
	CPU, OS, Go string
	CPUs        int
	MemoryGiB   float64
}

func readMachine() Machine {
	m := Machine{Go: runtime.Version(), CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(strings.SplitN(string(b), "\n", 2)[0], "MemTotal:")), "%f", &kb)
		m.MemoryGiB = kb / (1 << 20)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.OS = "Linux " + strings.TrimSpace(string(b)) + " " + runtime.GOARCH
	}
	return m
}

// The suite's fixed points.
const (
	LoadLatency  = 100 * time.Millisecond
	LoadRounds   = 3
	loadSeconds  = 20 // the ideal length of a 100 ms scenario at full scale
	zeroConc     = 64
	millionConc  = 1024
	millionTasks = 1_000_000
	// The in-flight phase: a model this slow keeps every slot full of waiting rollouts.
	inflightLatency = time.Second
	inflightConc    = 1024
)

// inflightConcs are the in-flight phase's concurrencies: one rollout (the runner's base), then
// inflightConc and four times that, scaled down below the full scale (never below 16).
func inflightConcs(scale float64) []int {
	c := inflightConc
	if scale < 1 {
		c = max(16, int(float64(inflightConc)*scale))
	}
	return []int{1, c, 4 * c}
}

// InFlightKiB is the runner's memory per rollout in flight from the in-flight phase: at its
// middle concurrency, over the base of one rollout ((peak RSS - base) / (concurrency - 1)), and
// from the middle concurrency to the highest; ok is false when the phase did not run.
func (s *Suite) InFlightKiB() (at, from float64, ok bool) {
	if len(s.InFlight) != 3 {
		return 0, 0, false
	}
	return kibPerRollout(s.InFlight[0], s.InFlight[1]), kibPerRollout(s.InFlight[1], s.InFlight[2]), true
}

// kibPerRollout is the runner's peak RSS from a to b over the rollouts in flight added, in KiB.
func kibPerRollout(a, b *Result) float64 {
	return float64(b.Runner.MaxRSS-a.Runner.MaxRSS) / 1024 / float64(b.Scenario.Concurrency-a.Scenario.Concurrency)
}

// RunSuite runs the suite's phases in order; log gets a line per step.
func RunSuite(ctx context.Context, c Config, o SuiteOptions, log io.Writer) (*Suite, error) {
	if o.Scale <= 0 {
		o.Scale = 1
	}
	if len(o.GoBenchPackages) == 0 {
		o.GoBenchPackages = []string{"./pkg/..."}
	}
	s := &Suite{Started: time.Now(), Machine: readMachine(), Options: o}
	defer func() { s.Took = time.Since(s.Started) }()
	say := func(format string, args ...any) { fmt.Fprintf(log, "bench: "+format+"\n", args...) }
	run := func(sc Scenario) (*Result, error) {
		say("%s: %d tasks (%v), concurrency %d, latency %v", sc.Name, sc.Tasks, sc.Shape, sc.Concurrency, sc.Latency)
		r, err := Run(ctx, c, sc)
		if err != nil {
			return nil, err
		}
		say("%s: %.0f model calls/s (steady), %.0f rollouts/s, runner %.1f µs CPU/turn, peak RSS %.0f MiB",
			sc.Name, r.SteadyCallRate, r.RolloutRate(), micros(r.CPUPerTurn()), mib(r.Runner.MaxRSS))
		return r, nil
	}
	shape3 := TaskShape{Rounds: LoadRounds}
	// Tasks for a 100 ms scenario: about loadSeconds at the slot limit, but no more than ten
	// windows of rollouts (at least 5,000 tasks): where the machine's CPU, not the slots, is the
	// limit, ten windows are enough for a steady state and the run stays in minutes.
	loadTasks := func(conc int) int {
		ideal := int(float64(conc) / LoadLatency.Seconds() * loadSeconds / LoadRounds)
		return o.n(min(ideal, max(10*conc, 5_000)))
	}

	if o.has("gobench") {
		say("go test -bench %s", strings.Join(o.GoBenchPackages, " "))
		bs, err := RunGoBench(ctx, o.BenchTime, o.GoBenchPackages, nil)
		if err != nil {
			return s, err
		}
		s.GoBench = bs
	}
	if o.has("ceiling") {
		say("simulator ceiling: a load generator, 64 connections, 10 s")
		cl, err := MeasureCeiling(ctx, c, shape3, 64, 10*time.Second)
		if err != nil {
			return s, err
		}
		s.Ceiling = cl
	}
	if o.has("floor") {
		say("HTTP client floor: net/http's Transport alone, then the runner's own, in turns, %d requests each at concurrency %d", max(o.n(20_000), 2_000), zeroConc)
		f, err := MeasureFloor(ctx, c, shape3, max(o.n(20_000), 2_000), zeroConc)
		if err != nil {
			return s, err
		}
		s.Floor = f
	}
	if o.has("load") {
		for _, conc := range []int{64, 256, 1024} {
			r, err := run(Scenario{Name: fmt.Sprintf("load-c%d", conc), Tasks: loadTasks(conc), Concurrency: conc, Latency: LoadLatency, Shape: shape3})
			if err != nil {
				return s, err
			}
			s.Load = append(s.Load, r)
		}
		// The same slots at a latency the machine's CPU can feed: what the runner's own
		// scheduling achieves when the processes are not short of CPU.
		slow := 1 * time.Second
		r, err := run(Scenario{Name: "load-c1024-1s", Tasks: o.n(int(1024 / slow.Seconds() * loadSeconds / LoadRounds)), Concurrency: 1024, Latency: slow, Shape: shape3})
		if err != nil {
			return s, err
		}
		s.Load = append(s.Load, r)
	}
	if o.has("zero") {
		r, err := run(Scenario{Name: "zero-c64", Tasks: o.n(20_000), Concurrency: zeroConc, Shape: shape3})
		if err != nil {
			return s, err
		}
		s.Zero = r
	}
	if o.has("rounds") {
		for _, rounds := range []int{1, 3, 10, 30} {
			r, err := run(Scenario{Name: fmt.Sprintf("rounds-%d", rounds), Tasks: o.n(30_000 / rounds), Concurrency: zeroConc, Shape: TaskShape{Rounds: rounds}})
			if err != nil {
				return s, err
			}
			s.Rounds = append(s.Rounds, r)
		}
	}
	if o.has("size") {
		for _, size := range []int{0, 4 << 10, 16 << 10, 64 << 10} {
			r, err := run(Scenario{Name: fmt.Sprintf("size-%d", size), Tasks: o.n(5_000), Concurrency: zeroConc, Shape: TaskShape{Rounds: LoadRounds, PromptBytes: size}})
			if err != nil {
				return s, err
			}
			s.Size = append(s.Size, r)
		}
	}
	if o.has("concurrency") {
		for _, conc := range []int{64, 256, 1024, 2048, 4096} {
			if r := findLoad(s.Load, conc); r != nil {
				s.Conc = append(s.Conc, r)
				continue
			}
			r, err := run(Scenario{Name: fmt.Sprintf("load-c%d", conc), Tasks: loadTasks(conc), Concurrency: conc, Latency: LoadLatency, Shape: shape3})
			if err != nil {
				return s, err
			}
			s.Conc = append(s.Conc, r)
		}
	}
	if o.has("inflight") {
		// At 1 s a rollout is ~3 s long and the slots stay full: the runner's peak RSS is its
		// base (one rollout in flight) plus what the rollouts in flight hold. Three windows of
		// rollouts each (more at a scale over 1); below the full scale the concurrencies shrink
		// with the scale.
		for _, conc := range inflightConcs(o.Scale) {
			tasks := max(o.n(3*conc), 3*conc) // more windows at a scale over 1
			if conc == 1 {
				tasks = 2
			}
			r, err := run(Scenario{Name: fmt.Sprintf("inflight-c%d", conc), Tasks: tasks, Concurrency: conc, Latency: inflightLatency, Shape: shape3})
			if err != nil {
				return s, err
			}
			s.InFlight = append(s.InFlight, r)
		}
		if at, from, ok := s.InFlightKiB(); ok {
			say("inflight: %.1f KiB per rollout at concurrency %d, %.1f KiB from %d to %d", at, s.InFlight[1].Scenario.Concurrency, from,
				s.InFlight[1].Scenario.Concurrency, s.InFlight[2].Scenario.Concurrency)
		}
	}
	if o.has("million") {
		n := o.n(millionTasks)
		var at []int
		for k := 1_000; k <= n; k *= 10 {
			at = append(at, k)
		}
		r, err := run(Scenario{Name: "million", Tasks: n, Concurrency: millionConc, Shape: TaskShape{Rounds: 1}, RSSAt: at, KeepOutput: true})
		if err != nil {
			return s, err
		}
		s.Million = r
		out := filepath.Join(c.Dir, "million", "out")
		defer os.RemoveAll(out)
		say("resume scan of %d records", r.Rollouts)
		t0 := time.Now()
		done, err := rundir.Compact(out, "", nil)
		if err != nil {
			return s, fmt.Errorf("resume scan: %w", err)
		}
		s.Resume = &Timing{Records: done.Len(), Took: time.Since(t0)}
		say("finish (Parquet, summary, evaluation and trajectory index) of %d records", r.Rollouts)
		t0 = time.Now()
		if _, err := rundir.Finish(out, rundir.FinishOptions{}); err != nil {
			return s, fmt.Errorf("finalize: %w", err)
		}
		s.Finalize = &Timing{Records: r.Rollouts, Took: time.Since(t0)}
	}
	return s, nil
}

// findLoad is the scenario at LoadLatency with that concurrency.
func findLoad(rs []*Result, conc int) *Result {
	for _, r := range rs {
		if r.Scenario.Concurrency == conc && r.Scenario.Latency == LoadLatency {
			return r
		}
	}
	return nil
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func mib(b int64) float64            { return float64(b) / (1 << 20) }
