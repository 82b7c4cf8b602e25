//go:build arrowcheck

// The Parquet files rollout writes, read by an independent reader: apache/arrow-go. It brings
// about 100 MB of modules (grpc, thrift, flatbuffers), so it is built only with -tags arrowcheck
// (.ci/run runs it; `make arrowcheck` too), not in every `make test`.

package record_test

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/record/recordtest"
)

func init() {
	independentRows = func(t *testing.T, path string) int64 { return readArrow(t, path).table.NumRows() }
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

// listAt is the list at row i of a, whose values are values: never nil.
func listAt[T any](a *array.List, values interface{ Value(int) T }, i int) []T {
	start, end := a.ValueOffsets(i)
	got := []T{}
	for j := start; j < end; j++ {
		got = append(got, values.Value(int(j)))
	}
	return got
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
			recs := recordtest.Fixture(tt.n)
			path := filepath.Join(t.TempDir(), "rewards.parquet")
			writeParquet(t, path, record.ParquetOptions{RowGroupSize: tt.rowGroup}, recs)

			af := readArrow(t, path)
			if !reflect.DeepEqual(af.columns, wantColumns) {
				t.Errorf("columns:\n got %v\nwant %v", af.columns, wantColumns)
			}
			if !reflect.DeepEqual(af.rowGroups, tt.wantGroups) {
				t.Errorf("row groups: got %v, want %v", af.rowGroups, tt.wantGroups)
			}
			limit := int64(tt.rowGroup)
			if limit <= 0 {
				limit = record.DefaultRowGroupSize
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
				if a.Value(i) != string(recs[row].FailureClass) {
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
				got := listAt[string](a, a.ListValues().(*array.String), i)
				want := recs[row].ToolNames
				if want == nil {
					want = []string{}
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("row %d tool_names: got %q, want %q", row, got, want)
				}
			})
			// Likewise context_tokens, a list of int64.
			each(t, af, "context_tokens", func(row int, a *array.List, i int) {
				if a.IsNull(i) {
					t.Errorf("row %d context_tokens: null, want a (possibly empty) list", row)
					return
				}
				got := listAt[int64](a, a.ListValues().(*array.Int64), i)
				want := recs[row].ContextTokens
				if want == nil {
					want = []int64{}
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("row %d context_tokens: got %v, want %v", row, got, want)
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
