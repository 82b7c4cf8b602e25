package gym

import (
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/internal/benchutil"
)

// benchVerifyBody is a /verify request of the counter task: the task row with the response.
var benchVerifyBody = []byte(strings.TrimSuffix(benchutil.CounterRow, "}") + `,"response":` + benchutil.CounterResponse + `}`)

// go test ./pkg/servers/gym -run '^$' -bench Scan -benchmem
func BenchmarkScanObject(b *testing.B) {
	b.SetBytes(int64(len(benchVerifyBody)))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := scanObject(benchVerifyBody); !ok {
			b.Fatal("not scanned")
		}
	}
}

func BenchmarkScanArray(b *testing.B) {
	tools := []byte(benchutil.CounterTools)
	b.SetBytes(int64(len(tools)))
	b.ReportAllocs()
	for b.Loop() {
		if items, ok := scanArray(tools); !ok || len(items) == 0 {
			b.Fatal("not scanned")
		}
	}
}
