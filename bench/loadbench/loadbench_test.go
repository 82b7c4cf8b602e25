package loadbench

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/localserve"
	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/plan"
)

// buildRollout builds the rollout binary into a temporary directory.
func buildRollout(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rollout")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/rollout-dev/rollout/cmd/rollout").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestWriteTasksAreValidRowsWithAPlan(t *testing.T) {
	for _, shape := range []TaskShape{{Rounds: 1}, {Rounds: 3, PromptBytes: 1000}, {Rounds: 30}} {
		var buf bytes.Buffer
		if err := WriteTasks(&buf, 5, shape); err != nil {
			t.Fatal(err)
		}
		n := 0
		sc := bufio.NewScanner(&buf)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			rd, err := dataset.NewReader(bytes.NewReader(sc.Bytes()), "tasks.jsonl")
			if err != nil {
				t.Fatal(err)
			}
			task, err := rd.Next()
			if err != nil || task.Err != nil {
				t.Fatalf("%v: row %d: %v %v", shape, n, err, task.Err)
			}
			if task.ID != strconv.Itoa(n) {
				t.Errorf("%v: row %d has id %q", shape, n, task.ID)
			}
			raw := task.Field(plan.Field)
			if shape.Rounds == 1 {
				if raw != nil || len(task.Params.Tools) != 0 {
					t.Errorf("one-round task with a plan or tools: %s", sc.Bytes())
				}
				n++
				continue
			}
			if raw == nil {
				t.Fatalf("%v: no plan", shape)
			}
			p, err := plan.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Rounds) != shape.Rounds-1 {
				t.Errorf("%v: plan has %d rounds", shape, len(p.Rounds))
			}
			n++
		}
		if n != 5 {
			t.Errorf("%v: %d rows", shape, n)
		}
	}
}

// TestSmokeLoad runs a tiny load scenario end to end, three processes on loopback, so that the
// benchmark cannot rot: every rollout must score 1 and the counts must add up. It asserts no
// timing.
func TestSmokeLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts three processes")
	}
	bin := buildRollout(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sc := Scenario{Name: "smoke", Tasks: 60, Concurrency: 8, Latency: 5 * time.Millisecond,
		Shape: TaskShape{Rounds: 3, PromptBytes: 200}, RSSAt: []int{10, 1 << 30}}
	res, err := Run(ctx, Config{Bin: bin, Dir: t.TempDir(), Poll: 20 * time.Millisecond}, sc)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rollouts != 60 || res.ModelCalls != 180 || res.ToolCalls != 120 {
		t.Errorf("rollouts %d, model calls %d, tool calls %d", res.Rollouts, res.ModelCalls, res.ToolCalls)
	}
	if res.Runner.CPU() <= 0 || res.Runner.MaxRSS <= 0 || res.Sim.CPU() <= 0 || res.Server.CPU() <= 0 {
		t.Errorf("no rusage: runner %+v sim %+v server %+v", res.Runner, res.Sim, res.Server)
	}
	if res.SlotLimit() != 1600 || res.SteadyCallRate <= 0 {
		t.Errorf("slot limit %g, steady rate %g", res.SlotLimit(), res.SteadyCallRate)
	}
	if res.RSSAt[1] != 0 {
		t.Errorf("RSS sampled at a count never reached: %v", res.RSSAt)
	}
	if len(res.Samples) == 0 {
		t.Error("no samples")
	}
}

// A run that does not do its work is an error, not a figure.
func TestSmokeLoadBrokenRunIsAnError(t *testing.T) {
	r := &Result{Scenario: Scenario{Tasks: 10, Shape: TaskShape{Rounds: 3}}, Rollouts: 10, MeanReward: 0.9, ModelCalls: 30, ToolCalls: 20}
	if r.check() == nil {
		t.Error("mean reward 0.9 passed the check")
	}
	r.MeanReward, r.ModelCalls = 1, 29
	if r.check() == nil {
		t.Error("a missing model call passed the check")
	}
	r.ModelCalls = 30
	if err := r.check(); err != nil {
		t.Error(err)
	}
	// A tool call that timed out is a broken run even where the reward came out 1.
	r.ToolErrors = 1
	if r.check() == nil {
		t.Error("a failed tool call passed the check")
	}
}

// The simulator and the resource server of a scenario hold every connection its runner keeps
// (one per rollout in flight to each): past a server's cap, requests wait unanswered.
func TestScenarioServersHoldTheConcurrency(t *testing.T) {
	for _, conc := range []int{1, 64, 1024, 2048, 4096} {
		sc := Scenario{Concurrency: conc, Latency: LoadLatency}
		for _, args := range [][]string{sc.simArgs("plan.jsonl"), sc.serveArgs()} {
			i := slices.Index(args, "--max-conns")
			if i < 0 || i+1 >= len(args) {
				t.Fatalf("concurrency %d: %q has no --max-conns", conc, args)
			}
			n, err := strconv.Atoi(args[i+1])
			if err != nil || n < conc+16 || n < localserve.DefaultMaxConns {
				t.Errorf("concurrency %d: %q: --max-conns %s, want at least the concurrency and the default %d", conc, args, args[i+1], localserve.DefaultMaxConns)
			}
		}
	}
}

func TestSteadyRate(t *testing.T) {
	var s []Sample
	for i := range 11 { // 0..100 calls over 10 s, 10 a second
		s = append(s, Sample{At: time.Duration(i) * time.Second, Calls: int64(i * 10)})
	}
	if r := steadyRate(s, 100); r != 10 {
		t.Errorf("steady rate %g, want 10", r)
	}
	if r := steadyRate(s[:2], 100); r != 0 {
		t.Errorf("steady rate of a run without a 90%% sample: %g", r)
	}
}

// make bench rewrites only the generated part of BENCHMARKS.md: the findings written by hand
// around it stay, a file without markers gets them appended, and a file with one marker is an
// error rather than a lost document.
func TestUpdateFileKeepsTheHandWrittenParts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	if err := os.WriteFile(path, []byte("# Benchmarks\n\nfindings\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := UpdateFile(path, []byte("first\n")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if err := os.WriteFile(path, append(b, "after\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := UpdateFile(path, []byte("second\n")); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	want := "# Benchmarks\n\nfindings\n\n" + BeginMarker + "\n\nsecond\n" + EndMarker + "\nafter\n"
	if string(b) != want {
		t.Errorf("got:\n%s\nwant:\n%s", b, want)
	}
	if err := os.WriteFile(path, []byte("x\n"+EndMarker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := UpdateFile(path, []byte("third\n")); err == nil {
		t.Error("a file with only the end marker was rewritten")
	}
}

// Rollouts per runner core and the cores all three processes used come from the rusage and
// the wall time; a scenario without CPU or wall time gives 0, not a division by zero.
func TestRolloutsPerCoreAndCores(t *testing.T) {
	r := &Result{Rollouts: 3000, Wall: 2 * time.Second,
		Runner: Usage{User: 1500 * time.Millisecond, System: 500 * time.Millisecond},
		Sim:    Usage{User: time.Second}, Server: Usage{System: 500 * time.Millisecond}}
	if got := r.RolloutsPerCore(); got != 1500 {
		t.Errorf("rollouts/s per runner core %g, want 1500", got)
	}
	if got := r.Cores(); got != 1.75 {
		t.Errorf("cores %g, want 1.75", got)
	}
	if z := (&Result{Rollouts: 5}); z.RolloutsPerCore() != 0 || z.Cores() != 0 {
		t.Errorf("without CPU or wall: %g per core, %g cores", z.RolloutsPerCore(), z.Cores())
	}
}

// The RSS at a count is the first sample that reached it; at the run's last count it is the
// largest sample over the run's last percent, so that a late poll after the runner freed its
// memory for the end of the run does not show the memory shrinking.
func TestSampleRSS(t *testing.T) {
	const mb = 1 << 20
	smp := func(rollouts, rss int64) Sample { return Sample{Rollouts: rollouts, RSS: rss * mb} }
	for _, c := range []struct {
		name    string
		samples []Sample
		at      []int
		tasks   int
		want    []int64 // MiB
	}{
		{"the last poll fell after the end freed memory",
			[]Sample{smp(500, 100), smp(1_000, 120), smp(9_800, 140), smp(9_900, 141), smp(9_950, 139), smp(10_000, 48), smp(10_000, 30)},
			[]int{1_000, 10_000}, 10_000, []int64{120, 141}},
		{"a sample before the last percent does not count",
			[]Sample{smp(9_000, 200), smp(9_950, 139), smp(10_000, 138)},
			[]int{10_000}, 10_000, []int64{139}},
		{"no sample in the last percent but the one at the end",
			[]Sample{smp(5_000, 150), smp(10_000, 130), smp(10_000, 20)},
			[]int{10_000}, 10_000, []int64{130}},
		{"samples after the first at the end (the end of the run) do not count",
			[]Sample{smp(9_950, 139), smp(10_000, 140), smp(10_000, 400)},
			[]int{10_000}, 10_000, []int64{140}},
		{"an earlier count takes the first sample that reached it, not the largest",
			[]Sample{smp(900, 50), smp(1_000, 90), smp(1_100, 95), smp(2_000, 99)},
			[]int{1_000}, 2_000, []int64{90}},
		{"a sample without RSS is skipped",
			[]Sample{smp(1_000, 0), smp(1_200, 91), smp(9_995, 0), smp(10_000, 0), smp(10_000, 60)},
			[]int{1_000, 10_000}, 10_000, []int64{91, 60}},
		{"a count never reached is 0, even with samples in its last percent",
			[]Sample{smp(1_000, 90), smp(9_990, 120)},
			[]int{1_000, 10_000}, 10_000, []int64{90, 0}},
		{"no samples",
			nil, []int{1_000}, 1_000, []int64{0}},
	} {
		got := sampleRSS(c.samples, c.at, c.tasks)
		for i := range got {
			got[i] /= mb
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: RSS at %v = %v MiB, want %v", c.name, c.at, got, c.want)
		}
	}
}

// The floor measures net/http's Transport and the runner's own over the same requests to a
// real simulator, each all of them.
func TestSmokeFloor(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts the simulator")
	}
	bin := buildRollout(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, err := MeasureFloor(ctx, Config{Bin: bin, Dir: t.TempDir()}, TaskShape{Rounds: 3}, 203, 4)
	if err != nil {
		t.Fatal(err)
	}
	if f.Own == nil || f.Own.Own != nil {
		t.Fatalf("the runner's own transport: %+v", f.Own)
	}
	for name, g := range map[string]*Floor{"net/http": f, "own": f.Own} {
		if g.Requests != 203 || g.Conns != 4 || g.Took <= 0 || g.CPU.CPU() <= 0 {
			t.Errorf("%s: %d requests at %d connections in %v, CPU %v", name, g.Requests, g.Conns, g.Took, g.CPU.CPU())
		}
	}
}
