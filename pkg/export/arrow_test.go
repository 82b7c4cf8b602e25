//go:build arrowcheck

// Every format's Parquet export read by an independent reader, apache/arrow-go (built only with
// -tags arrowcheck: `make arrowcheck`, as pkg/record's check).

package export_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// arrow-go reads each format's and layout's Parquet file (parquetExports): no
// MAP type anywhere in the schema, and every row, as arrow-go gives its values, equals the
// JSONL export's row (JSON text parsed).
func TestArrowReadsEveryFormat(t *testing.T) {
	dir := writeRun(t, 3, baseRun)
	for _, tc := range parquetExports {
		t.Run(tc.format+tc.layout, func(t *testing.T) {
			out := t.TempDir()
			pq, js := filepath.Join(out, "x.parquet"), filepath.Join(out, "x.jsonl")
			exportTo(t, tc.options(dir, pq))
			exportTo(t, tc.options(dir, js))
			rdr, err := file.OpenParquetFile(pq, false)
			if err != nil {
				t.Fatalf("arrow-go cannot open %s: %v", pq, err)
			}
			defer rdr.Close()
			fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
			if err != nil {
				t.Fatal(err)
			}
			tbl, err := fr.ReadTable(context.Background())
			if err != nil {
				t.Fatalf("arrow-go cannot read %s: %v", pq, err)
			}
			defer tbl.Release()
			for _, f := range tbl.Schema().Fields() {
				if hasMap(f.Type) {
					t.Errorf("column %s is %s", f.Name, f.Type)
				}
			}
			want := readJSONL[json.RawMessage](t, js)
			if int(tbl.NumRows()) != len(want) || len(want) == 0 {
				t.Fatalf("arrow-go read %d rows, JSONL has %d", tbl.NumRows(), len(want))
			}
			tr := array.NewTableReader(tbl, 1<<20)
			defer tr.Release()
			row := 0
			for tr.Next() {
				rec := tr.Record()
				for i := range int(rec.NumRows()) {
					obj := map[string]any{}
					for c, f := range rec.Schema().Fields() {
						obj[f.Name] = rec.Column(c).GetOneForMarshal(i)
					}
					b, err := json.Marshal(obj)
					if err != nil {
						t.Fatal(err)
					}
					if a, w := normalJSON(t, b), normalJSON(t, want[row]); a != w {
						t.Errorf("row %d:\narrow-go %s\nJSONL    %s", row, a, w)
					}
					row++
				}
			}
		})
	}
}

func hasMap(t arrow.DataType) bool {
	switch x := t.(type) {
	case *arrow.MapType:
		return true
	case *arrow.ListType:
		return hasMap(x.Elem())
	case *arrow.StructType:
		for _, f := range x.Fields() {
			if hasMap(f.Type) {
				return true
			}
		}
	}
	return false
}
