package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
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

// A run in which nothing ran ends without a status line.
func TestNothingRanPrintsNothing(t *testing.T) {
	var b bytes.Buffer
	New(&b, time.Hour).Finish(Status{Done: 0, Total: -1})
	(&bar{w: &b, width: func() int { return 80 }, now: time.Now}).Finish(Status{Done: 0, Total: 5})
	if b.Len() != 0 {
		t.Errorf("printed %q", b.String())
	}
}

func TestNilWriterShowsNothing(t *testing.T) {
	r := New(nil, time.Second)
	r.Update(Status{Done: 1})
	r.Finish(Status{Done: 1})
}

// The ETA comes from the recent rate: after a slow start, it follows the rate of the last
// seconds, not the mean since the start.
func TestRateWindowIsRecent(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var r rateWindow
	for i := range 60 { // a minute at 1 rollout/s
		r.add(t0.Add(time.Duration(i)*time.Second), i)
	}
	for i := range 40 { // then 20 s at 10 rollouts/s (every 0.5 s, 5 more)
		r.add(t0.Add(59*time.Second+time.Duration(i+1)*500*time.Millisecond), 59+5*(i+1))
	}
	if got := r.perSecond(); got != 10 {
		t.Errorf("recent rate %v, want 10 (the mean since the start would be %.2f)", got, float64(59+200)/79)
	}
	s := Status{Done: 259, Total: 359}
	if got := etaText(s, r.perSecond()); got != "eta 10s" {
		t.Errorf("eta %q, want eta 10s", got)
	}
	if got := etaText(Status{Done: 5, Total: -1}, 3); got != "" {
		t.Errorf("eta without a total: %q", got)
	}
	var one rateWindow
	one.add(t0, 3)
	if one.perSecond() != 0 {
		t.Errorf("one sample gives rate %v, want 0", one.perSecond())
	}
}

// lastDraw is what a terminal shows after out: the text after the last carriage return that
// is followed by something (progressbar clears a line with spaces before each draw).
func lastDraw(out string) string {
	out = strings.TrimRight(out, "\n")
	i := strings.LastIndex(out, "\r")
	return strings.TrimRight(out[i+1:], " ")
}

// The bar's line fits the terminal, says "reward -" until a rollout is scored, and ends at 100%.
func TestBarLine(t *testing.T) {
	for _, tc := range []struct {
		s     Status
		rate  float64
		width int
		want  string
	}{
		{Status{Done: 0, Total: 240}, 0, 120, "  0% |                                        | (0/240) 0.0/s  elapsed 3s  reward -, failed 0"},
		{Status{Done: 120, Total: 240, Scored: 100, MeanReward: 0.4123, Failed: 20}, 12, 120,
			" 50% |████████████████████                    | (120/240) 12.0/s  eta 10s  reward 0.412, failed 20"},
		{Status{Done: 240, Total: 240, Scored: 240, MeanReward: 0.5}, 20, 120, "100% |████████████████████████████████████████| (240/240) 20.0/s  elapsed 3s  reward 0.500, failed 0"},
		{Status{Done: 120, Total: 240, Scored: 100, MeanReward: 0.4123, Failed: 20}, 12, 60, " 50% |█████     | (120/240) 12.0/s  eta 10s"},
		{Status{Done: 120, Total: 240}, 12, 30, " 50% |█████     | (120/240)"},
		// With no total, a spinner stands first: which of its frames depends on how many draws
		// the library made, so any frame is right.
		{Status{Done: 7, Total: -1}, 2, 80, "? (7/-) 2.0/s  elapsed 3s  reward -, failed 0"},
	} {
		var buf bytes.Buffer
		t0 := time.Unix(1000, 0)
		b := &bar{w: &buf, width: func() int { return tc.width }, now: func() time.Time { return t0 }, start: t0.Add(-3 * time.Second)}
		b.draw(tc.s, tc.rate, t0)
		got := lastDraw(buf.String())
		if strings.HasPrefix(tc.want, "?") && got != "" && strings.ContainsRune(`|/-\`, rune(got[0])) {
			got = "?" + got[1:]
		}
		if !strings.HasSuffix(got, tc.want) || len(got)-len(tc.want) > 1 {
			t.Errorf("width %d:\n got %q\nwant %q", tc.width, got, tc.want)
		}
		if n := utf8.RuneCountInString(got); n >= tc.width {
			t.Errorf("width %d: line of %d columns: %q", tc.width, n, got)
		}
	}
}

// On a terminal the bar redraws in place and its last draw, at the end, stays with a newline.
func TestBarFinishes(t *testing.T) {
	for _, tc := range []struct {
		last Status
		want string
	}{
		{Status{Done: 10, Total: 10, Scored: 10, MeanReward: 1}, "100% |████████████████████████████████████████| (10/10) 1.0/s  elapsed 10s  reward 1.000, failed 0"},
		// Interrupted: the last draw keeps the count reached, not a full bar.
		{Status{Done: 7, Total: 10, Scored: 7, MeanReward: 1}, " 70% |████████████████████████████            | (7/10) 1.0/s  eta 3s  reward 1.000, failed 0"},
	} {
		var buf bytes.Buffer
		t0 := time.Unix(1000, 0)
		now := t0
		b := &bar{w: &buf, width: func() int { return 120 }, now: func() time.Time { return now }}
		for i := 1; i <= tc.last.Done; i++ {
			now = t0.Add(time.Duration(i) * time.Second)
			b.Update(Status{Done: i, Total: 10, Scored: i, MeanReward: 1})
		}
		now = now.Add(time.Second)
		b.Finish(tc.last)
		out := buf.String()
		if !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") != 1 {
			t.Errorf("%d newlines, want 1 at the end (the bar redraws in place): %q", strings.Count(out, "\n"), out)
		}
		if got := lastDraw(out); !strings.HasSuffix(got, tc.want) {
			t.Errorf("last draw:\n got %q\nwant %q", got, tc.want)
		}
	}
}
