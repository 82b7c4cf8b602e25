package loadbench

import (
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// result is a scenario's figures as the suite would have measured them.
func result(name string, conc, tasks, rounds int, latency time.Duration, runnerCPU time.Duration, maxRSSMiB float64, wall time.Duration) *Result {
	return &Result{
		Scenario: Scenario{Name: name, Tasks: tasks, Concurrency: conc, Latency: latency, Shape: TaskShape{Rounds: rounds}},
		Wall:     wall,
		Runner:   Usage{User: runnerCPU * 4 / 5, System: runnerCPU / 5, MaxRSS: int64(maxRSSMiB * (1 << 20))},
		Sim:      Usage{User: runnerCPU / 2}, Server: Usage{User: runnerCPU / 4},
		Rollouts: tasks, Scored: tasks, MeanReward: 1,
		ModelCalls: int64(tasks * rounds), ToolCalls: int64(tasks * (rounds - 1)),
		SteadyCallRate: float64(tasks*rounds) / wall.Seconds(), OverallCallRate: float64(tasks*rounds) / wall.Seconds(),
	}
}

// fullSuite is a whole `make bench` at scale 1, with figures like the ones BENCHMARKS.md
// records.
func fullSuite() *Suite {
	s := &Suite{
		Started: time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC), Took: 9 * time.Minute,
		Machine: Machine{CPU: "Test CPU", CPUs: 2, MemoryGiB: 24, OS: "Linux test amd64", Go: "go1.x"},
		Options: SuiteOptions{Scale: 1, GoBenchPackages: []string{"./pkg/..."}},
		GoBench: []GoBench{{Package: "github.com/rollout-dev/rollout/pkg/record", Name: "BenchmarkParquetWrite", N: 1_410_720,
			Metrics: map[string]float64{"ns/op": 820, "records/s": 1_218_699}, Units: []string{"ns/op", "records/s"}}},
		Ceiling: &Ceiling{Command: "wrk", RPS: 45_437, Requests: 455_096},
		// 28.8 µs a request: the floor of a 3-round turn (7/3 requests) is 67.2 µs.
		Floor: &Floor{Requests: 20_000, Conns: 64, Took: 773 * time.Millisecond, CPU: Usage{User: 456 * time.Millisecond, System: 120 * time.Millisecond},
			// The runner's own transport: 20 µs a request, 0.69× net/http's.
			Own: &Floor{Requests: 20_000, Conns: 64, Took: 610 * time.Millisecond, CPU: Usage{User: 300 * time.Millisecond, System: 100 * time.Millisecond}}},
	}
	s.Load = []*Result{
		result("load-c64", 64, 4266, 3, LoadLatency, 3200*time.Millisecond, 47.7, 20700*time.Millisecond),
		result("load-c256", 256, 5000, 3, LoadLatency, 3210*time.Millisecond, 63.4, 6360*time.Millisecond),
		result("load-c1024", 1024, 10240, 3, LoadLatency, 5990*time.Millisecond, 161, 5570*time.Millisecond),
		result("load-c1024-1s", 1024, 6826, 3, time.Second, 4670*time.Millisecond, 144, 21600*time.Millisecond),
	}
	// Slot efficiency 0.596 at 1024/100 ms.
	s.Load[2].SteadyCallRate = 6106
	// 144 µs a turn: 2.14× the floor, 1.43 of the limit.
	s.Zero = result("zero-c64", 64, 20_000, 3, 0, 8640*time.Millisecond, 71.1, 8430*time.Millisecond)
	s.Rounds = []*Result{
		result("rounds-1", 64, 30_000, 1, 0, 4710*time.Millisecond, 73.2, 4360*time.Millisecond),
		result("rounds-3", 64, 10_000, 3, 0, 4350*time.Millisecond, 53.4, 4240*time.Millisecond),
	}
	s.Conc = []*Result{s.Load[0], s.Load[1], s.Load[2],
		result("load-c4096", 4096, 40_960, 3, LoadLatency, 27400*time.Millisecond, 570, 22500*time.Millisecond)}
	// 30, 129 and 380 MiB: 99 KiB a rollout at 1024 over the base, 83.7 KiB from 1024 to 4096.
	s.InFlight = []*Result{
		result("inflight-c1", 1, 2, 3, time.Second, 20*time.Millisecond, 30, 6200*time.Millisecond),
		result("inflight-c1024", 1024, 3072, 3, time.Second, 2100*time.Millisecond, 129, 9800*time.Millisecond),
		result("inflight-c4096", 4096, 12288, 3, time.Second, 8700*time.Millisecond, 380, 16000*time.Millisecond),
	}
	// 141 MiB = 148 MB at the peak, 138 and 139 MiB at 10^5 and 10^6 done.
	m := result("million", 1024, 1_000_000, 1, 0, 218*time.Second, 141, 183*time.Second)
	m.Scenario.RSSAt = []int{1_000, 10_000, 100_000, 1_000_000}
	m.RSSAt = []int64{110 << 20, 142 << 20, 138 << 20, 139 << 20}
	s.Million = m
	s.Resume = &Timing{Records: 1_000_000, Took: 909 * time.Millisecond}
	s.Finalize = &Timing{Records: 1_000_000, Took: 2080 * time.Millisecond}
	return s
}

// quickSuite is `rollout-bench --scale 0.01 --phases zero,inflight,million`: no floor, no load
// phase, the in-flight phase at concurrency 16 and 64, the million phase at 10^4 tasks.
func quickSuite() *Suite {
	s := &Suite{
		Started: time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC), Took: time.Minute,
		Machine: Machine{CPU: "Test CPU", CPUs: 2, MemoryGiB: 24, OS: "Linux test amd64", Go: "go1.x"},
		Options: SuiteOptions{Scale: 0.01, Phases: []string{"zero", "inflight", "million"}},
	}
	s.Zero = result("zero-c64", 64, 200, 3, 0, 90*time.Millisecond, 40, 200*time.Millisecond)
	s.InFlight = []*Result{
		result("inflight-c1", 1, 2, 3, time.Second, 20*time.Millisecond, 30, 6200*time.Millisecond),
		result("inflight-c16", 16, 48, 3, time.Second, 40*time.Millisecond, 32, 9500*time.Millisecond),
		result("inflight-c64", 64, 192, 3, time.Second, 110*time.Millisecond, 38, 9600*time.Millisecond),
	}
	m := result("million", 1024, 10_000, 1, 0, 2*time.Second, 120, 3*time.Second)
	m.Scenario.RSSAt = []int{1_000, 10_000}
	m.RSSAt = []int64{100 << 20, 118 << 20}
	s.Million = m
	s.Resume = &Timing{Records: 10_000, Took: 20 * time.Millisecond}
	s.Finalize = &Timing{Records: 10_000, Took: 40 * time.Millisecond}
	return s
}

func target(t *testing.T, ts []Target, prefix string) Target {
	t.Helper()
	for _, g := range ts {
		if strings.HasPrefix(g.Name, prefix) {
			return g
		}
	}
	t.Fatalf("no target %q in %+v", prefix, ts)
	return Target{}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// Each of the targets is the measured figure over its limit, from the suite's own results: the
// CPU per turn against the HTTP floor of the same run, the memory per rollout in flight over
// the base of one rollout.
func TestTargetsAreRatiosToTheLimits(t *testing.T) {
	s := fullSuite()
	ts := s.Targets()
	for _, g := range ts {
		if g.Missing != "" {
			t.Errorf("%s: not measured at full scale: %s", g.Name, g.Missing)
		}
	}
	floorTurn := (576.0 / 20_000) * 1000 * 8 / 3 // µs: 8 requests in 3 turns
	cpu := target(t, ts, "runner CPU per turn")
	if want := 144 / floorTurn / FloorRatioMax; !near(cpu.Ratio, want) || cpu.Met {
		t.Errorf("CPU per turn: ratio %g met %v, want %g not met", cpu.Ratio, cpu.Met, want)
	}
	if !strings.Contains(cpu.Measured, "144 µs = 1.88× the floor of 76.8 µs") {
		t.Errorf("CPU per turn: %q", cpu.Measured)
	}
	at := target(t, ts, "memory per rollout in flight at concurrency 1024")
	if want := (129.0 - 30) * 1024 / 1023 / InFlightMaxKiB; !near(at.Ratio, want) || at.Met {
		t.Errorf("in flight at 1024: ratio %g, want %g", at.Ratio, want)
	}
	from := target(t, ts, "memory per rollout in flight from concurrency 1024 to 4096")
	if want := (380.0 - 129) * 1024 / 3072 / InFlightMaxKiB; !near(from.Ratio, want) || from.Met {
		t.Errorf("in flight from 1024 to 4096: ratio %g, want %g", from.Ratio, want)
	}
	peak := target(t, ts, "peak RSS, 10^6 tasks")
	if want := 141 * (1 << 20) / 1e6 / PeakRSSMaxMB; !near(peak.Ratio, want) || !peak.Met {
		t.Errorf("peak RSS: ratio %g met %v, want %g met", peak.Ratio, peak.Met, want)
	}
	growth := target(t, ts, "RSS growth from 10^5 to 10^6")
	if want := (139.0/138 - 1) * 100 / RSSGrowthMaxPct; !near(growth.Ratio, want) || !growth.Met {
		t.Errorf("growth: ratio %g, want %g", growth.Ratio, want)
	}
	slot := target(t, ts, "slot efficiency")
	if want := SlotEfficiencyMin / (6106.0 / 10240); !near(slot.Ratio, want) || slot.Met || !strings.Contains(slot.Measured, "cores of 2") {
		t.Errorf("slot efficiency: ratio %g, want %g; %q", slot.Ratio, want, slot.Measured)
	}
	for _, g := range ts {
		if strings.Contains(g.Name, "60") || strings.Contains(g.Limit, "300 MB") {
			t.Errorf("an old limit is still checked: %+v", g)
		}
	}
}

// A phase that was not run is said so in its target's row, and a phase run below the full
// scale is not checked against a limit meant for the full scale.
func TestTargetsOfPhasesNotRun(t *testing.T) {
	ts := quickSuite().Targets()
	for prefix, want := range map[string]string{
		"runner CPU per turn":                "not run (phase floor)",
		"slot efficiency":                    "not run (phase load)",
		"Parquet writing":                    "not run (phase gobench)",
		"memory per rollout in flight at":    "not checked: concurrency 16 and 64 at scale 0.01",
		"memory per rollout in flight from":  "not checked: concurrency 16 and 64 at scale 0.01",
		"peak RSS":                           "not checked: 10,000 tasks at scale 0.01",
		"resume scan":                        "not checked: 10,000 records at scale 0.01",
		"RSS growth from 10^5 to 10^6 tasks": "not checked",
	} {
		g := target(t, ts, prefix)
		if !strings.HasPrefix(g.Missing, want) || g.Met {
			t.Errorf("%s: missing %q, met %v; want %q", g.Name, g.Missing, g.Met, want)
		}
	}
	ts = (&Suite{Options: SuiteOptions{Scale: 1}}).Targets()
	for _, g := range ts {
		if !strings.HasPrefix(g.Missing, "not run (phase ") {
			t.Errorf("empty suite: %s: %q", g.Name, g.Missing)
		}
	}
}

// Rollouts per runner core pool every scenario of one latency and number of rounds, and name
// the lowest and highest with their concurrencies.
func TestPerCorePoolsByLatencyAndRounds(t *testing.T) {
	ps := fullSuite().PerCore()
	var got []string
	for _, p := range ps {
		got = append(got, p.Latency.String()+"/"+string(rune('0'+p.Rounds)))
	}
	if want := "0s/3 100ms/3 1s/3 0s/1"; strings.Join(got, " ") != want {
		t.Fatalf("groups %v, want %s", got, want)
	}
	p := ps[1] // 100 ms: load 64, 256, 1024 and 4096 (the concurrency phase's own, counted once)
	cpu := 3200 + 3210 + 5990 + 27400.0
	if want := (4266 + 5000 + 10240 + 40960) / cpu * 1000; p.Scenarios != 4 || !near(p.Rate, want) {
		t.Errorf("100 ms: %d scenarios, %g per core; want 4, %g", p.Scenarios, p.Rate, want)
	}
	if p.LowAt != 64 || p.HighAt != 1024 {
		t.Errorf("100 ms: lowest at %d, highest at %d", p.LowAt, p.HighAt)
	}
	if ps[2].Scenarios != 3 { // load-c1024-1s and the in-flight runs but their base
		t.Errorf("1 s: %d scenarios", ps[2].Scenarios)
	}
}

// The generated part of BENCHMARKS.md, as `make bench` writes it, for a whole suite and for a
// quick one with phases left out (go test -update rewrites the files).
func TestMarkdownGolden(t *testing.T) {
	for name, s := range map[string]*Suite{"full": fullSuite(), "quick": quickSuite()} {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			s.Markdown(&b)
			golden := filepath.Join("testdata", "markdown-"+name+".md")
			if *update {
				if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -update creates it)", err)
			}
			if b.String() != string(want) {
				t.Errorf("Markdown differs from %s (go test -update rewrites it):\n got:\n%s\nwant:\n%s", golden, b.String(), want)
			}
		})
	}
}

// The runner's own transport gets a line of its own next to net/http's floor, in the zero
// latency section and in the floor's own section, and none when it was not measured; the
// target stays a ratio to net/http's floor.
func TestOwnTransportFloorLine(t *testing.T) {
	const line = "**the runner's own transport: 20.0 µs a request** (user 15.0 µs, system 5.00 µs; 20,000 requests in 0.61 s, 0.69× net/http's)"
	full := fullSuite()
	var b strings.Builder
	full.Markdown(&b)
	if n := strings.Count(b.String(), line); n != 1 {
		t.Errorf("the full suite has the own transport's line %d times, want 1:\n%s", n, b.String())
	}
	var ratio float64
	for _, tg := range full.Targets() {
		if strings.HasPrefix(tg.Name, "runner CPU per turn") {
			ratio = tg.Ratio
		}
	}
	if want := 144 / (28.8 * 8 / 3) / FloorRatioMax; !near(ratio, want) { // 8 requests in 3 turns
		t.Errorf("CPU target ratio %g, want %g: net/http's floor", ratio, want)
	}
	floorOnly := &Suite{Options: SuiteOptions{Scale: 0.01, Phases: []string{"floor"}}, Floor: full.Floor}
	b.Reset()
	floorOnly.Markdown(&b)
	if !strings.Contains(b.String(), "### HTTP floor") || strings.Count(b.String(), line) != 1 {
		t.Errorf("the floor alone: want its section with the own transport's line:\n%s", b.String())
	}
	netOnly := *full.Floor
	netOnly.Own = nil
	floorOnly.Floor = &netOnly
	b.Reset()
	floorOnly.Markdown(&b)
	if strings.Contains(b.String(), "own transport:") {
		t.Errorf("a floor without the own transport's measurement has its line:\n%s", b.String())
	}
}
