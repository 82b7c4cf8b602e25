package export_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/pkg/export"
	"github.com/rollout-dev/rollout/pkg/record"
)

// writeScaleRun writes a run of n rollouts (8 repeats of n/8 tasks, rewards varying within
// each task, token arrays on every call) through rundir's writer, for the benchmarks.
func writeScaleRun(tb testing.TB, root string, n int) string {
	tb.Helper()
	const repeats = 8
	tasks := (n + repeats - 1) / repeats
	input := filepath.Join(root, "tasks.jsonl")
	f, err := os.Create(input)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := range tasks {
		w.WriteString(taskRow(i) + "\n")
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	f.Close()
	dir, sink := openRun(tb, root, input)
	for i := range n {
		task, repeat := i/repeats, i%repeats
		reward := float64((task+repeat)%3) / 2
		rec := record.Record{TaskIndex: int64(task), RolloutIndex: int64(repeat), TaskID: "t" + strconv.Itoa(task), Arm: "multi",
			Reward: reward, HasReward: true, Termination: "completed", Model: "m", RewardComponents: map[string]float64{"accuracy": reward}}
		if err := sink.Write(&record.Result{Record: rec, Trajectory: trajectory(task, rollout{task: task, repeat: repeat, tokens: true})}); err != nil {
			tb.Fatal(err)
		}
	}
	if err := sink.Close(); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// BenchmarkExport exports a run of 20,000 rollouts in each format (and sft's template layouts);
// rollouts/s is the rate.
func BenchmarkExport(b *testing.B) {
	const n = 20_000
	dir := writeScaleRun(b, b.TempDir(), n)
	out := b.TempDir()
	for _, c := range []struct{ f, format, layout string }{
		{"rl.parquet", "rl", ""}, {"rl.jsonl", "rl", ""}, {"sft.jsonl", "sft", ""},
		{"sft-text.jsonl", "sft", export.LayoutText}, {"sft-verl.parquet", "sft", export.LayoutVerl},
		{"preference.jsonl", "preference", ""}, {"nemo-gym.jsonl", "nemo-gym", ""},
	} {
		f, format, layout := c.f, c.format, c.layout
		template := map[string]string{export.LayoutText: qwen25, export.LayoutVerl: qwen3}[layout]
		b.Run(f, func(b *testing.B) {
			for b.Loop() {
				rep, err := export.Run(context.Background(), export.Options{Dirs: []string{dir}, Format: format, Layout: layout, ChatTemplate: template,
					Output: filepath.Join(out, f), Overwrite: true})
				if err != nil || rep.Kept == 0 {
					b.Fatal(err, rep)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rollouts/s")
		})
	}
}

// peakRSS is the process's peak resident set (VmHWM) in bytes since the last resetPeak.
func peakRSS(t *testing.T) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Skip("no VmHWM")
	return 0
}

// resetPeak resets the peak resident set (Linux: "5" to clear_refs).
func resetPeak(t *testing.T) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
}

// TestExportScale exports a run of ROLLOUT_EXPORT_SCALE rollouts (for BENCHMARKS.md: 10^6)
// to rl.parquet and rl.jsonl, and prints each export's rate and the peak RSS it added.
// Skipped unless the variable is set:
//
//	ROLLOUT_EXPORT_SCALE=1000000 go test -run TestExportScale -v -timeout 1h ./pkg/export/
func TestExportScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("ROLLOUT_EXPORT_SCALE"))
	if n <= 0 {
		t.Skip("set ROLLOUT_EXPORT_SCALE=N to export a run of N rollouts")
	}
	root := t.TempDir()
	start := time.Now()
	dir := writeScaleRun(t, root, n)
	t.Logf("wrote a run of %d rollouts in %s", n, time.Since(start).Round(time.Second))
	for _, f := range []string{"rl.parquet", "rl.jsonl", "sft.jsonl", "preference.jsonl", "nemo-gym.jsonl"} {
		format, _, _ := strings.Cut(f, ".")
		out := filepath.Join(root, f)
		resetPeak(t)
		start := time.Now()
		rep, err := export.Run(context.Background(), export.Options{Dirs: []string{dir}, Format: format, Output: out})
		if err != nil {
			t.Fatal(err)
		}
		el := time.Since(start)
		st, _ := os.Stat(out)
		t.Logf("%-18s %8d rows in %6.1fs: %7.0f rollouts/s, peak RSS %4d MiB, %5d MiB written", f, rep.Rows, el.Seconds(),
			float64(n)/el.Seconds(), peakRSS(t)>>20, st.Size()>>20)
		os.Remove(out)
	}
}
