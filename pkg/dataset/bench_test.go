package dataset

import (
	"bytes"
	"io"
	"os"
	"testing"
)

// BenchmarkReadRow parses NeMo Gym example_multi_step rows (about 12 KB
// each, with the full synonym list in the system prompt).
func BenchmarkReadRow(b *testing.B) {
	data, err := os.ReadFile("../../testdata/nemo-gym/example_multi_step/example.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Count(data, []byte("\n"))
	b.SetBytes(int64(len(data) / lines))
	b.ReportAllocs()
	var r *Reader
	for i := 0; i < b.N; i++ {
		if i%lines == 0 {
			r, _ = NewReader(bytes.NewReader(data), "bench")
		}
		t, err := r.Next()
		if err != nil && err != io.EOF {
			b.Fatal(err)
		}
		if t != nil && t.Err != nil {
			b.Fatal(t.Err)
		}
	}
}
