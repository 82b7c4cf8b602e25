package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
)

// The comparison's cost line: B's mean tokens and latency against A's, hand-computed. A: 1000
// and 3000 tokens (mean 2000), 100 and 300 ms (mean 200); B: 500 and 700 tokens (mean 600,
// −70%), 220 ms each (+10%). A failed rollout (no reward) is left out of its side's means.
func TestCompareCostLine(t *testing.T) {
	rec := func(task int64, prompt, completion int64, ms float64, class string) record.Record {
		r := cmpRec(task, 0, 1, class)
		r.PromptTokens, r.CompletionTokens, r.LatencyMs = prompt, completion, ms
		return r
	}
	a := []record.Record{rec(0, 900, 100, 100, ""), rec(1, 2800, 200, 300, "")}
	b := []record.Record{rec(0, 450, 50, 220, ""), rec(1, 650, 50, 220, ""), rec(2, 99999, 1, 99999, record.FailTimeout)}
	c := Compare(a, b, "arm=full", "arm=window:2", StatsOptions{Seed: 1})
	want := "arm=window:2 − arm=full: tokens -70.0% a rollout (600.0 vs 2000.0), latency +10.0% (220.0 vs 200.0 ms)"
	if got := c.cost(); got != want {
		t.Fatalf("cost line\n got %q\nwant %q", got, want)
	}
	for _, write := range []func(*bytes.Buffer) error{
		func(b *bytes.Buffer) error { return c.WriteText(b) },
		func(b *bytes.Buffer) error { return c.WriteMarkdown(b) },
	} {
		var buf bytes.Buffer
		if err := write(&buf); err != nil || !strings.Contains(buf.String(), want) {
			t.Errorf("%v: the output lacks the cost line:\n%s", err, buf.String())
		}
	}
	// A side without a scored rollout has no cost line.
	if got := Compare(a, []record.Record{rec(0, 1, 1, 1, record.FailTimeout)}, "A", "B", StatsOptions{}).cost(); got != "" {
		t.Fatalf("cost line without scored rollouts: %q", got)
	}
}
