package jsonfast

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/internal/benchutil"
)

// benchAnswer is a verify answer of the counter task (the task row echoed, the response, the
// reward): compact, as servers write it, and indented, for the white space paths.
var (
	benchAnswer = []byte(strings.TrimSuffix(benchutil.CounterRow, "}") + `,"response":` + benchutil.CounterResponse +
		`,"reward":1.0,"count_correct":1,"tool_calls":2,"count":2}`)
	benchIndented = func() []byte {
		var b bytes.Buffer
		if err := json.Indent(&b, benchAnswer, "", "  "); err != nil {
			panic(err)
		}
		return b.Bytes()
	}()
)

// go test ./internal/jsonfast -run '^$' -bench . -benchmem
func BenchmarkValid(b *testing.B) {
	benchDocs(b, func(b *testing.B, data []byte) {
		for b.Loop() {
			if !Valid(data) {
				b.Fatal("not valid")
			}
		}
	})
}

// benchDocs runs bench on the compact answer and on the indented one.
func benchDocs(b *testing.B, bench func(b *testing.B, data []byte)) {
	for _, c := range []struct {
		name string
		data []byte
	}{{"compact", benchAnswer}, {"indented", benchIndented}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.data)))
			b.ReportAllocs()
			bench(b, c.data)
		})
	}
}

func BenchmarkSkipValue(b *testing.B) {
	b.SetBytes(int64(len(benchAnswer)))
	b.ReportAllocs()
	for b.Loop() {
		if SkipValue(benchAnswer, 0, 0) != len(benchAnswer) {
			b.Fatal("not skipped")
		}
	}
}

func BenchmarkAppendCompact(b *testing.B) {
	benchDocs(b, func(b *testing.B, data []byte) {
		dst := make([]byte, 0, len(data))
		for b.Loop() {
			var ok bool
			if dst, ok = AppendCompact(dst[:0], data); !ok || len(dst) != len(benchAnswer) {
				b.Fatal("not compacted")
			}
		}
	})
}
