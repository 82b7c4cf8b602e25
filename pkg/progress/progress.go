// Package progress shows how a run goes on stderr: a progress bar when it
// is a terminal, plain periodic status lines otherwise.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Status is what the run reports after each record.
type Status struct {
	Done       int
	Total      int // -1 when unknown (stdin)
	Failed     int
	MeanReward float64
	Scored     int
}

// Reporter shows progress. It is called from the run's one writer
// goroutine, never from the hot path of a rollout.
type Reporter interface {
	Update(Status)
	Finish(Status)
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	if u, ok := w.(interface{ Unwrap() io.Writer }); ok {
		w = u.Unwrap()
	}
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// New returns a progress bar on a terminal, else a Lines reporter printing
// every interval. A nil w gives a reporter that shows nothing.
func New(w io.Writer, interval time.Duration) Reporter {
	if w == nil {
		return nop{}
	}
	if IsTerminal(w) {
		return &bar{w: w}
	}
	return &Lines{W: w, Interval: interval, start: time.Now()}
}

type nop struct{}

func (nop) Update(Status) {}
func (nop) Finish(Status) {}

// bar is a progress bar, made at the first update, when the total is
// known (-1, for stdin, gives a spinner).
type bar struct {
	w    io.Writer
	b    *progressbar.ProgressBar
	last time.Time
}

func newBar(w io.Writer, total int) *progressbar.ProgressBar {
	return progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("rollouts"),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("rollouts"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetWidth(30),
	)
}

func (b *bar) Update(s Status) {
	if b.b == nil {
		b.b = newBar(b.w, s.Total)
	}
	now := time.Now()
	if now.Sub(b.last) >= 200*time.Millisecond || s.Done == s.Total {
		b.last = now
		b.b.Describe(describe(s))
	}
	_ = b.b.Set(s.Done)
}

func (b *bar) Finish(s Status) {
	if b.b == nil {
		b.b = newBar(b.w, s.Total)
	}
	b.b.Describe(describe(s))
	_ = b.b.Set(s.Done)
	_ = b.b.Finish()
}

func describe(s Status) string {
	if s.Scored == 0 {
		return fmt.Sprintf("reward -, failed %d", s.Failed)
	}
	return fmt.Sprintf("reward %.3f, failed %d", s.MeanReward, s.Failed)
}

// Lines prints one status line every Interval (and a last one at the end):
// for logs and CI, where a redrawn bar is noise.
type Lines struct {
	W        io.Writer
	Interval time.Duration
	mu       sync.Mutex
	start    time.Time
	last     time.Time
}

// Update prints a line when Interval has passed since the last one.
func (l *Lines) Update(s Status) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.start.IsZero() {
		l.start = now
	}
	if l.last.IsZero() {
		l.last = l.start
	}
	if now.Sub(l.last) < l.Interval {
		return
	}
	l.last = now
	l.print(s, now)
}

// Finish prints the last line.
func (l *Lines) Finish(s Status) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.start.IsZero() {
		l.start = time.Now()
	}
	l.print(s, time.Now())
}

func (l *Lines) print(s Status, now time.Time) {
	el := now.Sub(l.start)
	rate := 0.0
	if el > 0 {
		rate = float64(s.Done) / el.Seconds()
	}
	total, eta := "?", ""
	if s.Total >= 0 {
		total = fmt.Sprint(s.Total)
		if rate > 0 && s.Done < s.Total {
			eta = fmt.Sprintf(" eta %s", time.Duration(float64(s.Total-s.Done)/rate*float64(time.Second)).Round(time.Second))
		}
	}
	fmt.Fprintf(l.W, "rollout: %d/%s done, %.1f rollouts/s, %s%s, elapsed %s\n",
		s.Done, total, rate, describe(s), eta, el.Round(time.Second))
}
