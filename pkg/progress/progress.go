// Package progress shows how a run goes on stderr: a progress bar when it
// is a terminal, plain periodic status lines otherwise.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

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
		return newBarReporter(w)
	}
	return &Lines{W: w, Interval: interval, start: time.Now()}
}

type nop struct{}

func (nop) Update(Status) {}
func (nop) Finish(Status) {}

// bar redraws one line on a terminal: count, bar, percent, recent rate, ETA, reward and
// failures, cut to the terminal's width; at most every 200 ms, and once more at the end, at
// its final count (100% when the run completed), followed by a newline.
type bar struct {
	w     io.Writer
	width func() int // the terminal's columns
	rate  rateWindow
	last  time.Time
	start time.Time
	now   func() time.Time
}

func newBarReporter(w io.Writer) *bar {
	return &bar{w: w, width: func() int { return termWidth(w) }, now: time.Now}
}

// termWidth is the terminal's width in columns (80 when it cannot be told).
func termWidth(w io.Writer) int {
	if u, ok := w.(interface{ Unwrap() io.Writer }); ok {
		w = u.Unwrap()
	}
	if f, ok := w.(*os.File); ok {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
			return cols
		}
	}
	return 80
}

func (b *bar) Update(s Status) {
	now := b.now()
	if b.start.IsZero() {
		b.start = now
	}
	b.rate.add(now, s.Done)
	if now.Sub(b.last) < 200*time.Millisecond {
		return
	}
	b.last = now
	fmt.Fprintf(b.w, "\r%s\x1b[K", barLine(s, b.rate.perSecond(), now.Sub(b.start), b.width()))
}

func (b *bar) Finish(s Status) {
	if s.Done == 0 && b.start.IsZero() {
		return // nothing ran, nothing was drawn
	}
	now := b.now()
	if b.start.IsZero() {
		b.start = now
	}
	fmt.Fprintf(b.w, "\r%s\x1b[K\n", barLine(s, overall(s, now.Sub(b.start)), now.Sub(b.start), b.width()))
}

// barLine is the bar's text for a terminal of width columns: "rollouts 120/240
// [=======>       ]  50%  12.3/s  eta 10s  reward 0.412, failed 3". The parts that do not fit
// are left out, from the end, and the bar shrinks to fit.
func barLine(s Status, rate float64, elapsed time.Duration, width int) string {
	count := fmt.Sprintf("rollouts %d/%s", s.Done, totalText(s))
	var tail []string
	if s.Total > 0 {
		tail = append(tail, fmt.Sprintf("%3d%%", s.Done*100/s.Total))
	}
	tail = append(tail, fmt.Sprintf("%.1f/s", rate))
	if eta := etaText(s, rate); eta != "" {
		tail = append(tail, eta)
	} else {
		tail = append(tail, "elapsed "+elapsed.Round(time.Second).String())
	}
	tail = append(tail, describe(s))
	width-- // the cursor's column
	for len(tail) > 0 && len(count)+len(strings.Join(tail, "  "))+2 > width {
		tail = tail[:len(tail)-1]
	}
	rest := strings.Join(tail, "  ")
	line := count
	if s.Total > 0 {
		if barWidth := min(40, width-len(count)-len(rest)-5); barWidth >= 10 {
			filled := s.Done * barWidth / s.Total
			bar := strings.Repeat("=", filled)
			if filled < barWidth {
				bar += ">" + strings.Repeat(" ", barWidth-filled-1)
			}
			line += " [" + bar + "]"
		}
	}
	if rest != "" {
		line += "  " + rest
	}
	if len(line) > width {
		line = line[:max(width, 0)]
	}
	return line
}

func totalText(s Status) string {
	if s.Total < 0 {
		return "?"
	}
	return fmt.Sprint(s.Total)
}

// etaText is "eta 9s" from the recent rate, or "" when it cannot be told.
func etaText(s Status, rate float64) string {
	if s.Total < 0 || rate <= 0 || s.Done >= s.Total {
		return ""
	}
	return "eta " + time.Duration(float64(s.Total-s.Done)/rate*float64(time.Second)).Round(time.Second).String()
}

// rateWindow is the recent rate of completed rollouts: over the samples of the last
// rateSpan, so that the ETA follows a run that speeds up or slows down (the rate since the
// start would say 1 s with 9 s left after a slow start).
type rateWindow struct {
	samples []sample
}

type sample struct {
	at   time.Time
	done int
}

const rateSpan = 10 * time.Second

func (r *rateWindow) add(at time.Time, done int) {
	r.samples = append(r.samples, sample{at, done})
	// Keep one sample older than the span, as the window's start.
	i := 0
	for i+1 < len(r.samples) && at.Sub(r.samples[i+1].at) >= rateSpan {
		i++
	}
	r.samples = r.samples[i:]
	if len(r.samples) > 4096 { // many records within the span: thin out the middle
		r.samples = append(r.samples[:1], r.samples[len(r.samples)-2048:]...)
	}
}

// overall is the run's mean rate, for its last line.
func overall(s Status, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return float64(s.Done) / elapsed.Seconds()
}

// perSecond is the rate over the window (0 before two samples apart in time).
func (r *rateWindow) perSecond() float64 {
	if len(r.samples) < 2 {
		return 0
	}
	first, last := r.samples[0], r.samples[len(r.samples)-1]
	d := last.at.Sub(first.at).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(last.done-first.done) / d
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
	rate     rateWindow
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
	l.rate.add(now, s.Done)
	if now.Sub(l.last) < l.Interval {
		return
	}
	l.last = now
	l.print(s, now, false)
}

// Finish prints the last line (none when nothing ran).
func (l *Lines) Finish(s Status) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.Done == 0 {
		return
	}
	now := time.Now()
	if l.start.IsZero() {
		l.start = now
	}
	l.print(s, now, true)
}

// print prints a status line: with the recent rate and an ETA while the run goes on, with the
// run's mean rate at the end.
func (l *Lines) print(s Status, now time.Time, final bool) {
	el := now.Sub(l.start)
	rate := l.rate.perSecond()
	if final {
		rate = overall(s, el)
	}
	eta := etaText(s, rate)
	if eta != "" {
		eta = ", " + eta
	}
	fmt.Fprintf(l.W, "rollout: %d/%s done, %.1f rollouts/s, %s%s, elapsed %s\n",
		s.Done, totalText(s), rate, describe(s), eta, el.Round(time.Second))
}
