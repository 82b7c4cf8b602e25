package view

import (
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/benchutil"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/record/recordtest"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// benchN is the number of rollouts of BenchmarkOpen's run; ROLLOUT_BENCH_N overrides it.
func benchN() int {
	if s := os.Getenv("ROLLOUT_BENCH_N"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	return 1_000_000
}

// bigRun writes a finished run of n realistic records (recordtest.Realistic: 125,000 tasks
// × 2 arms × 4 repeats at 10^6, ~3% failures) with trajectories of 300 to 500 bytes, through
// the sink and rundir.Finish as rollout run does (which also writes trajectories.idx).
func bigRun(b *testing.B, n int) string {
	b.Helper()
	dir := b.TempDir()
	start := time.Now()
	s, err := rundir.OpenSink(dir, rundir.SinkOptions{SyncEvery: 1 << 30, SyncInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	if err := recordtest.WriteRealistic(n, s.Write); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	if _, err := rundir.Finish(dir, rundir.FinishOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Logf("built a finished %d-rollout run in %v", n, time.Since(start).Round(time.Millisecond))
	return dir
}

// BenchmarkOpen times what rollout view does with a 10^6-rollout run, with the peak heap
// and RSS over it:
//
//   - load: Load (rollouts.parquet by the columns the pages use, evaluation.json, the
//     trajectory index) and the overview page's data (its four histograms over every rollout);
//   - query: one page of the rollouts of one failure class sorted by latency (filter and sort
//     of the whole table; the next pages reuse it);
//   - first-trajectory: one transcript, through the offset index (no scan of
//     trajectories.jsonl), with the table's key order, sorted once on the first lookup;
//   - trajectory: another transcript;
//   - compare: the compare page of the two arms (report.Comparer fed from the table a record
//     at a time, the per-task scatter and the changed tasks), with the peak heap and RSS over
//     that step alone;
//   - index-build: building the index by one scan of trajectories.jsonl, what the first view
//     of a run without trajectories.idx pays once.
func BenchmarkOpen(b *testing.B) {
	n := benchN()
	dir := bigRun(b, n)
	runtime.GC()
	b.ResetTimer()
	for range b.N {
		heap, rss := benchutil.PeakHeap(), benchutil.PeakRSS()
		cpu0 := benchutil.ProcessCPU()
		t0 := time.Now()
		d, err := Load([]string{dir}, Options{})
		if err != nil {
			b.Fatal(err)
		}
		ov := d.overview(serverLinks{})
		load, loadCPU := time.Since(t0), benchutil.ProcessCPU()-cpu0
		if d.Rollouts() != n || ov.Rollouts != n {
			b.Fatalf("%d rollouts loaded, want %d", d.Rollouts(), n)
		}
		t1 := time.Now()
		q, _ := ParseQuery(url.Values{"failure": {record.FailTimeout}, "sort": {"latency"}, "desc": {"1"}}, 1)
		page := d.rolloutsPage(q, serverLinks{})
		query := time.Since(t1)
		if page.Total == 0 || len(page.Rows) != min(DefaultPageSize, page.Total) {
			b.Fatalf("query: %d rows of %d", len(page.Rows), page.Total)
		}
		t2 := time.Now()
		k := d.key(n / 2)
		tr, err := d.transcript(k, serverLinks{})
		if err != nil || !tr.Found || len(tr.Messages) == 0 {
			b.Fatalf("transcript of %+v: %v", k, err)
		}
		first := time.Since(t2)
		t2 = time.Now()
		if tr, err := d.transcript(d.key(n/3), serverLinks{}); err != nil || !tr.Found {
			b.Fatalf("transcript: %v", err)
		}
		traj := time.Since(t2)
		peakHeap, peakRSS := heap(), rss()
		runtime.GC()
		cheap, crss := benchutil.PeakHeap(), benchutil.PeakRSS()
		t4 := time.Now()
		c := d.comparison(Side{0, "single"}, Side{0, "multi"}, serverLinks{})
		compare := time.Since(t4)
		if c.C.Pairs == 0 {
			b.Fatal("compare: no pairs")
		}
		comparePeakHeap, comparePeakRSS := cheap(), crss()
		t3 := time.Now()
		if _, err := rundir.BuildTrajIndex(dir); err != nil {
			b.Fatal(err)
		}
		build := time.Since(t3)
		b.ReportMetric(load.Seconds(), "load-s")
		b.ReportMetric(float64(query.Milliseconds()), "query-ms")
		b.ReportMetric(loadCPU.Seconds(), "load-cpu-s")
		b.ReportMetric(float64(first.Microseconds())/1000, "first-trajectory-ms")
		b.ReportMetric(float64(traj.Microseconds())/1000, "trajectory-ms")
		b.ReportMetric(build.Seconds(), "index-build-s")
		b.ReportMetric(compare.Seconds(), "compare-s")
		b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MB")
		b.ReportMetric(float64(peakRSS)/(1<<20), "peak-rss-MB")
		b.ReportMetric(float64(comparePeakHeap)/(1<<20), "compare-peak-heap-MB")
		b.ReportMetric(float64(comparePeakRSS)/(1<<20), "compare-peak-rss-MB")
		runtime.KeepAlive(d)
	}
	st, _ := os.Stat(filepath.Join(dir, rundir.TrajectoriesFile))
	pq, _ := os.Stat(filepath.Join(dir, rundir.ParquetFile))
	b.Logf("trajectories.jsonl %d MB, rollouts.parquet %d MB", st.Size()>>20, pq.Size()>>20)
}
