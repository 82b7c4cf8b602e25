package record_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/benchutil"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/record/recordtest"
)

var wantColumns = []string{
	"task_index", "rollout_index", "task_id", "task_hash", "arm", "agent", "model", "endpoint",
	"reward", "has_reward", "reward_components", "rounds", "tool_calls",
	"tool_names", "tool_errors", "prompt_tokens", "completion_tokens",
	"latency_ms", "termination", "failure_class", "error", "attempts",
	"started_at", "seed", "source_file", "source_line",
	"context", "context_tokens", "context_tokens_max", "context_removed_messages", "context_removed_bytes", "briefing_calls",
	"task_fields",
}

func writeParquet(t testing.TB, path string, opt record.ParquetOptions, recs []record.Record) {
	t.Helper()
	w, err := record.NewParquetWriter(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if err := w.Write(&record.Result{Record: recs[i]}); err != nil {
			t.Fatalf("write record %d: %v", i, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestParquetRoundTrip(t *testing.T) {
	for _, tt := range []struct{ n, rowGroup int }{{0, 7}, {1, 7}, {25, 7}, {1000, 300}} {
		n := tt.n
		recs := recordtest.Fixture(n)
		path := filepath.Join(t.TempDir(), "rewards.parquet")
		writeParquet(t, path, record.ParquetOptions{RowGroupSize: tt.rowGroup}, recs)
		got, err := record.ReadParquet(path)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if len(got) != n {
			t.Fatalf("n=%d: read %d records", n, len(got))
		}
		for i := range recs {
			if d := recordtest.Diff(got[i], recs[i]); d != "" {
				t.Errorf("n=%d record %d: %s", n, i, d)
			}
		}
	}
}

func TestParquetTempThenRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rewards.parquet")
	w, err := record.NewParquetWriter(path, record.ParquetOptions{RowGroupSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recordtest.Fixture(5) {
		if err := w.Write(&record.Result{Record: r}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(path + ".tmp"); err != nil {
		t.Errorf("before Close: temporary file: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("before Close: final file: got %v, want it absent", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Close: temporary file: got %v, want it gone", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("after Close: final file: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := w.Write(&record.Result{}); err == nil {
		t.Error("Write after Close: no error")
	}
	if got, err := record.ReadParquet(path); err != nil || len(got) != 5 {
		t.Errorf("read back: %d records, %v", len(got), err)
	}
}

func TestParquetFailures(t *testing.T) {
	t.Run("missing directory", func(t *testing.T) {
		_, err := record.NewParquetWriter(filepath.Join(t.TempDir(), "no", "such", "x.parquet"), record.ParquetOptions{})
		if err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("rename fails", func(t *testing.T) {
		// The final path is a non-empty directory, so the rename fails;
		// Close must report it and leave neither a temporary file nor a
		// changed final path.
		dir := t.TempDir()
		path := filepath.Join(dir, "rewards.parquet")
		if err := os.MkdirAll(filepath.Join(path, "occupied"), 0o755); err != nil {
			t.Fatal(err)
		}
		w, err := record.NewParquetWriter(path, record.ParquetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(&record.Result{Record: recordtest.Fixture(1)[0]}); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err == nil {
			t.Fatal("Close: no error")
		}
		if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("temporary file after failed Close: %v, want it removed", err)
		}
		if st, err := os.Stat(path); err != nil || !st.IsDir() {
			t.Errorf("final path changed: %v", err)
		}
	})
	t.Run("started_at out of range", func(t *testing.T) {
		// parquet-go reads milliseconds back through int64 nanoseconds, so
		// times outside 1678..2262 would come back garbled; they are refused
		// and the writer goes on.
		path := filepath.Join(t.TempDir(), "rewards.parquet")
		w, err := record.NewParquetWriter(path, record.ParquetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		good := recordtest.Fixture(1)[0]
		for _, at := range []time.Time{
			time.Time{}.Add(time.Millisecond),
			time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC),
			time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC),
		} {
			bad := good
			bad.StartedAt = at
			if err := w.Write(&record.Result{Record: bad}); err == nil {
				t.Errorf("StartedAt %v: no error", at)
			}
		}
		edge := good
		edge.StartedAt = time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC)
		for _, r := range []record.Record{good, edge} {
			if err := w.Write(&record.Result{Record: r}); err != nil {
				t.Fatalf("after a refused record: %v", err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		got, err := record.ReadParquet(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || !got[0].StartedAt.Equal(good.StartedAt) || !got[1].StartedAt.Equal(edge.StartedAt) {
			t.Errorf("read back %d records: %+v", len(got), got)
		}
	})
	t.Run("read missing file", func(t *testing.T) {
		if _, err := record.ReadParquet(filepath.Join(t.TempDir(), "none.parquet")); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("read non-parquet", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "bad.parquet")
		if err := os.WriteFile(path, []byte(`{"not":"parquet"}`+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := record.ReadParquet(path); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("read truncated", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "rewards.parquet")
		writeParquet(t, path, record.ParquetOptions{}, recordtest.Fixture(10))
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data[:len(data)/2], 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := record.ReadParquet(path); err == nil {
			t.Fatal("no error")
		}
	})
}

// TestParquetMemoryBounded checks that the writer's heap does not grow with
// the number of records: only the open row group (and the footer's few
// bytes per row group) are held.
func TestParquetMemoryBounded(t *testing.T) {
	if testing.Short() || raceEnabled {
		// Under the race detector parquet-go is ~50x slower.
		t.Skip("slow; run without -race and -short")
	}
	const rowGroup, first, more = 500, 5_000, 50_000
	recs := recordtest.Fixture(64)
	w, err := record.NewParquetWriter(filepath.Join(t.TempDir(), "big.parquet"), record.ParquetOptions{RowGroupSize: rowGroup})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	write := func(n int) {
		for i := range n {
			r := recs[i%len(recs)]
			r.TaskIndex = int64(i)
			if err := w.Write(&record.Result{Record: r}); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(first)
	before := heap()
	write(more)
	after := heap()
	growth := int64(after) - int64(before)
	// 50,000 records hold well over 10 MB of Go values; 100 more row
	// groups of footer metadata are a few hundred KB.
	const limit = 4 << 20
	t.Logf("heap %d -> %d bytes (growth %d) over %d records", before, after, growth, more)
	if growth > limit {
		t.Errorf("heap grew by %d bytes writing %d records; want at most %d", growth, more, limit)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkParquetWrite appends realistic records (benchRecord: two task fields, two or three
// tool names and reward components, a few failures) to rollouts.parquet, Close included.
func BenchmarkParquetWrite(b *testing.B) {
	const pool = 4096
	recs := make([]record.Record, pool)
	for i := range recs {
		recs[i] = recordtest.Realistic(i)
	}
	path := filepath.Join(b.TempDir(), "bench.parquet")
	b.ReportAllocs()
	b.ResetTimer()
	w, err := record.NewParquetWriter(path, record.ParquetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	cpu := benchutil.ProcessCPU()
	res := &record.Result{}
	for i := 0; i < b.N; i++ {
		// The pool again, with later tasks and start times.
		res.Record = recs[i%pool]
		lap := int64(i / pool)
		res.Record.TaskIndex += lap * pool / 8
		res.Record.SourceLine += lap * pool / 8
		res.Record.StartedAt = res.Record.StartedAt.Add(time.Duration(lap) * pool * 37 * time.Millisecond)
		if err := w.Write(res); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64((benchutil.ProcessCPU()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/record")
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "records/s")
	}
	if st, err := os.Stat(path); err == nil {
		b.ReportMetric(float64(st.Size())/float64(b.N), "bytes/record")
	}
}

// The column writers work in parallel, and flush pages as they fill: many rows, long
// strings (a page fills every few hundred rows), small row groups; the file reads back
// whole. Run with -race.
func TestParquetParallelPages(t *testing.T) {
	n := 20_000
	if raceEnabled {
		n = 6_000
	}
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = recordtest.Realistic(i)
		recs[i].Error = strings.Repeat(fmt.Sprintf("error %d; ", i), 40)
		recs[i].TaskID = fmt.Sprintf("%0300d", i)
	}
	path := filepath.Join(t.TempDir(), "rewards.parquet")
	writeParquet(t, path, record.ParquetOptions{RowGroupSize: 2500}, recs)
	got, err := record.ReadParquet(path)
	if err != nil || len(got) != n {
		t.Fatalf("read %d records, %v", len(got), err)
	}
	for i := range recs {
		if d := recordtest.Diff(got[i], recs[i]); d != "" {
			t.Fatalf("record %d: %s", i, d)
		}
	}
	if independentRows != nil {
		if got := independentRows(t, path); got != int64(n) {
			t.Errorf("the independent reader reads %d rows, want %d", got, n)
		}
	}
}

// independentRows counts a Parquet file's rows with a reader we did not write (arrow-go), when
// the tests are built with -tags arrowcheck (.ci/run does); nil otherwise, so that `make test`
// does not download arrow-go and its dependencies.
var independentRows func(t *testing.T, path string) int64
