package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// Off a terminal, progress is plain lines: none before the interval has
// passed, then one per interval, and a last one at the end.
func TestLinesOffTerminal(t *testing.T) {
	var b bytes.Buffer
	r := New(&b, time.Hour)
	if _, ok := r.(*Lines); !ok {
		t.Fatalf("a buffer got %T, want *Lines", r)
	}
	r.Update(Status{Done: 1, Total: 10})
	if b.Len() != 0 {
		t.Errorf("printed before the interval: %q", b.String())
	}
	r.Finish(Status{Done: 10, Total: 10, Failed: 2, MeanReward: 0.5, Scored: 8})
	got := b.String()
	if !strings.HasPrefix(got, "rollout: 10/10 done, ") || !strings.Contains(got, "reward 0.500, failed 2") || strings.Count(got, "\n") != 1 {
		t.Errorf("last line = %q", got)
	}

	b.Reset()
	l := &Lines{W: &b, Interval: time.Nanosecond}
	l.Update(Status{Done: 3, Total: -1})
	time.Sleep(time.Millisecond)
	l.Update(Status{Done: 4, Total: -1})
	if n := strings.Count(b.String(), "\n"); n != 1 || !strings.Contains(b.String(), "4/? done") || !strings.Contains(b.String(), "reward -") {
		t.Errorf("lines = %q", b.String())
	}
}

func TestNilWriterShowsNothing(t *testing.T) {
	r := New(nil, time.Second)
	r.Update(Status{Done: 1})
	r.Finish(Status{Done: 1})
}
