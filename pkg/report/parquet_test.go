package report

import (
	"context"
	"errors"
	"fmt"
	"github.com/rollout-dev/rollout/internal/benchutil"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

var wantColumns = []string{
	"task_index", "rollout_index", "task_id", "task_hash", "arm", "agent", "model",
	"reward", "has_reward", "reward_components", "rounds", "tool_calls",
	"tool_names", "tool_errors", "prompt_tokens", "completion_tokens",
	"latency_ms", "termination", "failure_class", "error", "attempts",
	"started_at", "seed", "source_file", "source_line", "task_fields",
}

func writeParquet(t testing.TB, path string, opt ParquetOptions, recs []Record) {
	t.Helper()
	w, err := NewParquetWriter(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if err := w.Write(&Result{Record: recs[i]}); err != nil {
			t.Fatalf("write record %d: %v", i, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// arrowFile is what the independent reader (arrow-go) sees in a file.
type arrowFile struct {
	columns   []string
	rowGroups []int64 // rows per row group
	codecs    map[compress.Compression]int
	table     arrow.Table
}

func readArrow(t *testing.T, path string) *arrowFile {
	t.Helper()
	rdr, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatalf("arrow-go cannot open %s: %v", path, err)
	}
	t.Cleanup(func() { rdr.Close() })
	md := rdr.MetaData()
	af := &arrowFile{codecs: map[compress.Compression]int{}}
	for i := range md.NumRowGroups() {
		rg := md.RowGroup(i)
		af.rowGroups = append(af.rowGroups, rg.NumRows())
		for j := range rg.NumColumns() {
			cc, err := rg.ColumnChunk(j)
			if err != nil {
				t.Fatal(err)
			}
			af.codecs[cc.Compression()]++
		}
	}
	fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatalf("arrow-go cannot read %s: %v", path, err)
	}
	t.Cleanup(tbl.Release)
	af.table = tbl
	for _, f := range tbl.Schema().Fields() {
		af.columns = append(af.columns, f.Name)
	}
	return af
}

// column returns the chunks of the named column.
func (af *arrowFile) column(t *testing.T, name string) []arrow.Array {
	t.Helper()
	idx := af.table.Schema().FieldIndices(name)
	if len(idx) != 1 {
		t.Fatalf("column %q: found %d times", name, len(idx))
	}
	return af.table.Column(idx[0]).Data().Chunks()
}

// each calls fn for every row of the named column with the chunk and the
// row's index in it, and checks the column's type.
func each[A arrow.Array](t *testing.T, af *arrowFile, name string, fn func(row int, a A, i int)) {
	t.Helper()
	row := 0
	for _, chunk := range af.column(t, name) {
		a, ok := chunk.(A)
		if !ok {
			t.Fatalf("column %q: arrow type %T (%s)", name, chunk, chunk.DataType())
		}
		for i := range chunk.Len() {
			fn(row, a, i)
			row++
		}
	}
	if row != int(af.table.NumRows()) {
		t.Fatalf("column %q: %d rows, table has %d", name, row, af.table.NumRows())
	}
}

func TestParquetReadByArrow(t *testing.T) {
	tests := []struct {
		name       string
		n          int
		rowGroup   int
		wantGroups []int64
	}{
		{"several row groups", 25, 7, []int64{7, 7, 7, 4}},
		{"exact multiple", 14, 7, []int64{7, 7}},
		{"one row group", 5, 0, []int64{5}},
		{"single row", 1, 1, []int64{1}},
		{"no rows", 0, 7, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs := fixtureRecords(tt.n)
			path := filepath.Join(t.TempDir(), "rewards.parquet")
			writeParquet(t, path, ParquetOptions{RowGroupSize: tt.rowGroup}, recs)

			af := readArrow(t, path)
			if !reflect.DeepEqual(af.columns, wantColumns) {
				t.Errorf("columns:\n got %v\nwant %v", af.columns, wantColumns)
			}
			if !reflect.DeepEqual(af.rowGroups, tt.wantGroups) {
				t.Errorf("row groups: got %v, want %v", af.rowGroups, tt.wantGroups)
			}
			limit := int64(tt.rowGroup)
			if limit <= 0 {
				limit = DefaultRowGroupSize
			}
			for i, n := range af.rowGroups {
				if n > limit {
					t.Errorf("row group %d has %d rows, limit %d", i, n, limit)
				}
			}
			// The two map columns (reward_components, task_fields) have
			// two leaf columns each (key and value), so there are two column
			// chunks more than there are top-level columns.
			want := map[compress.Compression]int{}
			if len(tt.wantGroups) > 0 {
				want[compress.Codecs.Zstd] = (len(wantColumns) + 2) * len(tt.wantGroups)
			}
			if !reflect.DeepEqual(af.codecs, want) {
				t.Errorf("codecs: got %v, want only ZSTD on every column chunk (%v)", af.codecs, want)
			}
			if got := af.table.NumRows(); got != int64(tt.n) {
				t.Fatalf("rows: got %d, want %d", got, tt.n)
			}

			each(t, af, "task_index", func(row int, a *array.Int64, i int) {
				if a.Value(i) != recs[row].TaskIndex {
					t.Errorf("row %d task_index: got %d, want %d", row, a.Value(i), recs[row].TaskIndex)
				}
			})
			each(t, af, "rollout_index", func(row int, a *array.Int64, i int) {
				if a.Value(i) != recs[row].RolloutIndex {
					t.Errorf("row %d rollout_index: got %d, want %d", row, a.Value(i), recs[row].RolloutIndex)
				}
			})
			each(t, af, "task_id", func(row int, a *array.String, i int) {
				if a.Value(i) != recs[row].TaskID {
					t.Errorf("row %d task_id: got %q, want %q", row, a.Value(i), recs[row].TaskID)
				}
			})
			each(t, af, "arm", func(row int, a *array.String, i int) {
				if a.Value(i) != recs[row].Arm {
					t.Errorf("row %d arm: got %q, want %q", row, a.Value(i), recs[row].Arm)
				}
			})
			each(t, af, "reward", func(row int, a *array.Float64, i int) {
				if a.Value(i) != recs[row].Reward {
					t.Errorf("row %d reward: got %v, want %v", row, a.Value(i), recs[row].Reward)
				}
			})
			each(t, af, "has_reward", func(row int, a *array.Boolean, i int) {
				if a.Value(i) != recs[row].HasReward {
					t.Errorf("row %d has_reward: got %v, want %v", row, a.Value(i), recs[row].HasReward)
				}
			})
			each(t, af, "rounds", func(row int, a *array.Int32, i int) {
				if a.Value(i) != recs[row].Rounds {
					t.Errorf("row %d rounds: got %d, want %d", row, a.Value(i), recs[row].Rounds)
				}
			})
			each(t, af, "failure_class", func(row int, a *array.String, i int) {
				if a.Value(i) != recs[row].FailureClass {
					t.Errorf("row %d failure_class: got %q, want %q", row, a.Value(i), recs[row].FailureClass)
				}
			})
			each(t, af, "error", func(row int, a *array.String, i int) {
				if a.Value(i) != recs[row].Error {
					t.Errorf("row %d error: got %q, want %q", row, a.Value(i), recs[row].Error)
				}
			})
			each(t, af, "latency_ms", func(row int, a *array.Float64, i int) {
				if a.Value(i) != recs[row].LatencyMs {
					t.Errorf("row %d latency_ms: got %v, want %v", row, a.Value(i), recs[row].LatencyMs)
				}
			})
			each(t, af, "source_line", func(row int, a *array.Int64, i int) {
				if a.Value(i) != recs[row].SourceLine {
					t.Errorf("row %d source_line: got %d, want %d", row, a.Value(i), recs[row].SourceLine)
				}
			})
			// A nil map is written as an empty map.
			each(t, af, "reward_components", func(row int, a *array.Map, i int) {
				if a.IsNull(i) {
					t.Errorf("row %d reward_components: null, want a (possibly empty) map", row)
					return
				}
				keys, items := a.Keys().(*array.String), a.Items().(*array.Float64)
				start, end := a.ValueOffsets(i)
				got := map[string]float64{}
				for j := start; j < end; j++ {
					got[keys.Value(int(j))] = items.Value(int(j))
				}
				want := recs[row].RewardComponents
				if want == nil {
					want = map[string]float64{}
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("row %d reward_components: got %v, want %v", row, got, want)
				}
			})
			// A nil list is written as an empty list.
			each(t, af, "tool_names", func(row int, a *array.List, i int) {
				if a.IsNull(i) {
					t.Errorf("row %d tool_names: null, want a (possibly empty) list", row)
					return
				}
				values := a.ListValues().(*array.String)
				start, end := a.ValueOffsets(i)
				got := []string{}
				for j := start; j < end; j++ {
					got = append(got, values.Value(int(j)))
				}
				want := recs[row].ToolNames
				if want == nil {
					want = []string{}
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("row %d tool_names: got %q, want %q", row, got, want)
				}
			})
			// A zero time is written as null; others to the millisecond, in UTC.
			each(t, af, "started_at", func(row int, a *array.Timestamp, i int) {
				want := recs[row].StartedAt
				if want.IsZero() {
					if !a.IsNull(i) {
						t.Errorf("row %d started_at: got %v, want null", row, a.Value(i))
					}
					return
				}
				typ := a.DataType().(*arrow.TimestampType)
				if typ.Unit != arrow.Millisecond || typ.TimeZone != "UTC" {
					t.Errorf("started_at type: got %s, want timestamp[ms, tz=UTC]", typ)
				}
				if a.IsNull(i) {
					t.Errorf("row %d started_at: null, want %v", row, want)
					return
				}
				want = want.Truncate(time.Millisecond)
				if got := a.Value(i).ToTime(typ.Unit); !got.Equal(want) {
					t.Errorf("row %d started_at: got %v, want %v", row, got, want)
				}
			})
		})
	}
}

func TestParquetRoundTrip(t *testing.T) {
	for _, tt := range []struct{ n, rowGroup int }{{0, 7}, {1, 7}, {25, 7}, {1000, 300}} {
		n := tt.n
		recs := fixtureRecords(n)
		path := filepath.Join(t.TempDir(), "rewards.parquet")
		writeParquet(t, path, ParquetOptions{RowGroupSize: tt.rowGroup}, recs)
		got, err := ReadParquet(path)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if len(got) != n {
			t.Fatalf("n=%d: read %d records", n, len(got))
		}
		for i := range recs {
			if d := diffRecord(got[i], recs[i]); d != "" {
				t.Errorf("n=%d record %d: %s", n, i, d)
			}
		}
	}
}

// diffRecord compares two records as they survive Parquet: nil and empty
// maps and lists are equal, and times are equal to the millisecond
// regardless of location.
func diffRecord(got, want Record) string {
	norm := func(r Record) Record {
		if len(r.RewardComponents) == 0 {
			r.RewardComponents = nil
		}
		if len(r.ToolNames) == 0 {
			r.ToolNames = nil
		}
		if len(r.TaskFields) == 0 {
			r.TaskFields = nil
		}
		if r.StartedAt.IsZero() {
			r.StartedAt = time.Time{}
		} else {
			r.StartedAt = r.StartedAt.Truncate(time.Millisecond).UTC()
		}
		return r
	}
	g, w := norm(got), norm(want)
	if !reflect.DeepEqual(g, w) {
		return fmt.Sprintf("got  %+v\nwant %+v", g, w)
	}
	return ""
}

func TestParquetTempThenRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rewards.parquet")
	w, err := NewParquetWriter(path, ParquetOptions{RowGroupSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range fixtureRecords(5) {
		if err := w.Write(&Result{Record: r}); err != nil {
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
	if err := w.Write(&Result{}); err == nil {
		t.Error("Write after Close: no error")
	}
	if got, err := ReadParquet(path); err != nil || len(got) != 5 {
		t.Errorf("read back: %d records, %v", len(got), err)
	}
}

func TestParquetFailures(t *testing.T) {
	t.Run("missing directory", func(t *testing.T) {
		_, err := NewParquetWriter(filepath.Join(t.TempDir(), "no", "such", "x.parquet"), ParquetOptions{})
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
		w, err := NewParquetWriter(path, ParquetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(&Result{Record: fixtureRecords(1)[0]}); err != nil {
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
		w, err := NewParquetWriter(path, ParquetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		good := fixtureRecords(1)[0]
		for _, at := range []time.Time{
			time.Time{}.Add(time.Millisecond),
			time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC),
			time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC),
		} {
			bad := good
			bad.StartedAt = at
			if err := w.Write(&Result{Record: bad}); err == nil {
				t.Errorf("StartedAt %v: no error", at)
			}
		}
		edge := good
		edge.StartedAt = time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC)
		for _, r := range []Record{good, edge} {
			if err := w.Write(&Result{Record: r}); err != nil {
				t.Fatalf("after a refused record: %v", err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		got, err := ReadParquet(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || !got[0].StartedAt.Equal(good.StartedAt) || !got[1].StartedAt.Equal(edge.StartedAt) {
			t.Errorf("read back %d records: %+v", len(got), got)
		}
	})
	t.Run("read missing file", func(t *testing.T) {
		if _, err := ReadParquet(filepath.Join(t.TempDir(), "none.parquet")); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("read non-parquet", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "bad.parquet")
		if err := os.WriteFile(path, []byte(`{"not":"parquet"}`+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadParquet(path); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("read truncated", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "rewards.parquet")
		writeParquet(t, path, ParquetOptions{}, fixtureRecords(10))
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data[:len(data)/2], 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadParquet(path); err == nil {
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
	recs := fixtureRecords(64)
	w, err := NewParquetWriter(filepath.Join(t.TempDir(), "big.parquet"), ParquetOptions{RowGroupSize: rowGroup})
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
			if err := w.Write(&Result{Record: r}); err != nil {
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
	recs := make([]Record, pool)
	for i := range recs {
		recs[i] = benchRecord(i)
	}
	path := filepath.Join(b.TempDir(), "bench.parquet")
	b.ReportAllocs()
	b.ResetTimer()
	w, err := NewParquetWriter(path, ParquetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	cpu := benchutil.ProcessCPU()
	res := &Result{}
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
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = benchRecord(i)
		recs[i].Error = strings.Repeat(fmt.Sprintf("error %d; ", i), 40)
		recs[i].TaskID = fmt.Sprintf("%0300d", i)
	}
	path := filepath.Join(t.TempDir(), "rewards.parquet")
	writeParquet(t, path, ParquetOptions{RowGroupSize: 2500}, recs)
	got, err := ReadParquet(path)
	if err != nil || len(got) != n {
		t.Fatalf("read %d records, %v", len(got), err)
	}
	for i := range recs {
		if d := diffRecord(got[i], recs[i]); d != "" {
			t.Fatalf("record %d: %s", i, d)
		}
	}
	af := readArrow(t, path)
	if got := af.table.NumRows(); got != int64(n) {
		t.Errorf("arrow-go reads %d rows, want %d", got, n)
	}
}
