package rundir

// Benchmarks of the output path at the scale of the performance issue: a 10^6-record run.
//
//	go test -run '^$' -bench 'ResumeScan|Finalize|AppendRecord' -benchmem ./pkg/rundir
//	go test -run '^$' -bench 'ParquetWrite' -benchmem ./pkg/record
//
// The 10^6-record run directory (journal.jsonl and trajectories.jsonl, written through a real
// Sink) is built once per test process in a temporary directory, outside the timers, and
// removed by TestMain.

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/benchutil"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/record/recordtest"
	"github.com/rollout-dev/rollout/pkg/report"
)

func TestMain(m *testing.M) {
	code := m.Run()
	benchRuns.cleanup()
	os.Exit(code)
}

// benchRun is a run's output directory with n records written through a Sink.
type benchRun struct {
	dir   string
	n     int
	bytes int64 // journal size
}

// benchRunCache holds the run directories built by cachedRun.
type benchRunCache struct {
	mu   sync.Mutex
	runs map[string]*benchRun
	dirs []string
}

var benchRuns benchRunCache

func (c *benchRunCache) cleanup() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range c.dirs {
		os.RemoveAll(d)
	}
}

// cachedRun returns a run directory of n records (a few hundred bytes of trajectory each),
// built once per process. Benchmarks that change it work on a copy (copyRun).
func cachedRun(b *testing.B, n int) *benchRun {
	b.Helper()
	benchRuns.mu.Lock()
	defer benchRuns.mu.Unlock()
	key := strconv.Itoa(n)
	if r := benchRuns.runs[key]; r != nil {
		return r
	}
	dir, err := os.MkdirTemp("", "rollout-bench-")
	if err != nil {
		b.Fatal(err)
	}
	benchRuns.dirs = append(benchRuns.dirs, dir)
	start := time.Now()
	// A real run syncs every 256 records; here that would only time the disk.
	s, err := OpenSink(dir, SinkOptions{SyncEvery: 1 << 30, SyncInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	if err := recordtest.WriteRealistic(n, s.Write); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, JournalFile))
	if err != nil {
		b.Fatal(err)
	}
	r := &benchRun{dir: dir, n: n, bytes: st.Size()}
	if benchRuns.runs == nil {
		benchRuns.runs = map[string]*benchRun{}
	}
	benchRuns.runs[key] = r
	b.Logf("built a %d-record run in %v: journal %d MB", n, time.Since(start).Round(time.Millisecond), st.Size()>>20)
	return r
}

// copyRun copies the journal and trajectories of src into dst.
func copyRun(b *testing.B, src, dst string) {
	b.Helper()
	for _, name := range []string{JournalFile, TrajectoriesFile} {
		in, err := os.Open(filepath.Join(src, name))
		if err != nil {
			b.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, name))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			b.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

func appendFile(b *testing.B, path, text string) {
	b.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.WriteString(text); err != nil {
		b.Fatal(err)
	}
	f.Close()
}

// benchN is the number of records of the large benchmarks; ROLLOUT_BENCH_N overrides it.
func benchN() int {
	if s := os.Getenv("ROLLOUT_BENCH_N"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	return 1_000_000
}

// BenchmarkResumeScan times what rollout run --resume does to know which rollouts are done:
// Compact over a run of 10^6 records.
//
//   - clean: the run stopped cleanly; nothing to drop.
//   - crashed: the journal ends in a torn line and the trajectories file in 40 lines of
//     rollouts that have no record.
//   - retry-failed: --retry-failed; the ~2% infrastructure failures are dropped from both
//     files, which are rewritten.
func BenchmarkResumeScan(b *testing.B) {
	run := cachedRun(b, benchN())
	retry := func(r *record.Record) bool { return !r.FailureClass.Infra() }
	wantRetry := 0
	for i := range run.n {
		if !recordtest.Realistic(i).FailureClass.Infra() {
			wantRetry++
		}
	}
	crash := func(b *testing.B, dir string) {
		var side strings.Builder
		for i := range 40 {
			r := recordtest.Realistic(run.n + i)
			fmt.Fprintf(&side, `{"task_index":%d,"rollout_index":%d,"arm":%q,"task_id":%q,"trajectory":%s}`+"\n",
				r.TaskIndex, r.RolloutIndex, r.Arm, r.TaskID, recordtest.Trajectory(i, 400))
		}
		appendFile(b, filepath.Join(dir, TrajectoriesFile), side.String())
		appendFile(b, filepath.Join(dir, JournalFile), `{"task_index":125000,"rollout_index":0,"arm":"sin`)
	}
	for _, bc := range []struct {
		name    string
		keep    func(*record.Record) bool
		prepare func(b *testing.B, dir string) // on a fresh copy, before each scan; nil: scan the cached run
		want    int
	}{
		{"clean", nil, nil, run.n},
		{"crashed", nil, crash, run.n},
		{"retry-failed", retry, func(*testing.B, string) {}, wantRetry},
	} {
		b.Run(bc.name, func(b *testing.B) {
			dir := run.dir
			if bc.prepare != nil {
				dir = b.TempDir()
			}
			b.SetBytes(run.bytes)
			var cpu time.Duration
			var peak, held uint64
			b.ResetTimer()
			for range b.N {
				if bc.prepare != nil {
					b.StopTimer()
					copyRun(b, run.dir, dir)
					bc.prepare(b, dir)
					b.StartTimer()
				}
				base := heapAlloc()
				stop := benchutil.PeakHeap()
				c := benchutil.ProcessCPU()
				done, err := Compact(dir, "", bc.keep)
				cpu += benchutil.ProcessCPU() - c
				p := stop()
				peak = max(peak, p-min(base, p))
				if err != nil {
					b.Fatal(err)
				}
				if done.Len() != bc.want {
					b.Fatalf("%d rollouts done, want %d", done.Len(), bc.want)
				}
				b.StopTimer()
				// What a resumed run holds for the rest of its life: the set of its done rollouts.
				h := heapAlloc()
				held = max(held, h-min(base, h))
				runtime.KeepAlive(done)
				b.StartTimer()
			}
			b.StopTimer()
			s := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(s, "s/scan")
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/scan")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(held)/float64(run.n), "held-B/rollout")
			b.ReportMetric(float64(run.n)/s, "records/s")
		})
	}
}

// BenchmarkFinalize times the end of a 10^6-record run, and reports the peak heap
// (sampled) and the peak RSS of the process over it:
//
//   - finalize: finalize (rollouts.parquet and summary.json; its evaluation unused);
//   - two-passes: finalize, then report.EvaluateJournal (evaluation.json);
//   - one-pass: finalize, which evaluates as it writes (as rollout run does);
//   - one-pass-no-ci: the same without the bootstrap interval (2000 resamples of 125,000
//     tasks in 3 scopes), the part of the evaluation that is not reading records;
//   - finish: Finish, all that the end of a run does (finalize, evaluation.json, the
//     trajectory index).
func BenchmarkFinalize(b *testing.B) {
	run := cachedRun(b, benchN())
	check := func(b *testing.B, sum report.Summary, ev *report.Evaluation) {
		if sum.Rollouts != run.n || ev != nil && ev.Overall.Rollouts != run.n {
			b.Fatalf("%d rollouts, want %d", sum.Rollouts, run.n)
		}
	}
	b.Run("finalize", func(b *testing.B) {
		benchFinalize(b, run, func(dir string) {
			sum, _, err := finalize(dir, finalizeOptions{})
			if err != nil {
				b.Fatal(err)
			}
			check(b, sum, nil)
		})
	})
	b.Run("two-passes", func(b *testing.B) {
		benchFinalize(b, run, func(dir string) {
			sum, _, err := finalize(dir, finalizeOptions{})
			if err != nil {
				b.Fatal(err)
			}
			ev, err := report.EvaluateJournal(filepath.Join(dir, JournalFile), report.StatsOptions{})
			if err != nil {
				b.Fatal(err)
			}
			check(b, sum, ev)
		})
	})
	b.Run("finish", func(b *testing.B) {
		benchFinalize(b, run, func(dir string) {
			fin, err := Finish(dir, FinishOptions{})
			if err != nil {
				b.Fatal(err)
			}
			check(b, fin.Summary, fin.Evaluation)
		})
	})
	for _, bc := range []struct {
		name      string
		bootstrap int
	}{{"one-pass", 0}, {"one-pass-no-ci", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			benchFinalize(b, run, func(dir string) {
				sum, ev, err := finalize(dir, finalizeOptions{Stats: report.StatsOptions{Bootstrap: bc.bootstrap}})
				if err != nil {
					b.Fatal(err)
				}
				check(b, sum, ev)
			})
		})
	}
}

func benchFinalize(b *testing.B, run *benchRun, end func(dir string)) {
	b.ReportAllocs()
	b.ResetTimer()
	var heap, rss uint64
	var cpu time.Duration
	for range b.N {
		b.StopTimer()
		debug.FreeOSMemory() // each time from what the process holds, not what it had
		b.StartTimer()
		stopHeap, readRSS, c := benchutil.PeakHeap(), benchutil.PeakRSS(), benchutil.ProcessCPU()
		end(run.dir)
		cpu += benchutil.ProcessCPU() - c
		heap, rss = max(heap, stopHeap()), max(rss, readRSS())
	}
	b.StopTimer()
	s := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(s, "s/op")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(run.n)/s, "records/s")
	b.ReportMetric(float64(heap)/(1<<20), "peak-heap-MB")
	b.ReportMetric(float64(rss)/(1<<20), "peak-RSS-MB")
	for _, name := range []string{ParquetFile, SummaryFile, EvaluationFile, TrajIndexFile} {
		os.Remove(filepath.Join(run.dir, name))
	}
}

// BenchmarkAppendRecord times Sink.Write of one realistic result (a record and a trajectory
// of about 1 KB) to a real Sink in a temporary directory: with the default syncing (fsync
// every 256 records), and without syncing (the CPU cost alone).
func BenchmarkAppendRecord(b *testing.B) {
	const pool = 1024
	results := make([]record.Result, pool)
	for i := range results {
		results[i] = record.Result{Record: recordtest.Realistic(i), Trajectory: recordtest.Trajectory(i, 1024)}
	}
	for _, bc := range []struct {
		name string
		opt  SinkOptions
	}{
		{"default", SinkOptions{}},
		{"nosync", SinkOptions{SyncEvery: 1 << 30, SyncInterval: time.Hour}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := OpenSink(b.TempDir(), bc.opt)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := s.Write(&results[i%pool]); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// heapAlloc is the heap in use after a collection.
func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
