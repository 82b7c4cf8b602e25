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
		return newBarReporter(w)
	}
	return &Lines{W: w, Interval: interval, start: time.Now()}
}

type nop struct{}

func (nop) Update(Status) {}
func (nop) Finish(Status) {}

// bar is schollz/progressbar's bar on a terminal ("  50% |█████     | (120/240) 12.0/s  eta 10s
// reward 0.412, failed 20"), with our tail after the count: the recent rate, the ETA from it,
// the mean reward ("-" until a rollout is scored) and the failures. It redraws at most every
// 200 ms, and once more at the end at its final count (100% when the run completed), followed
// by a newline. What does not fit the terminal's width is left out from the end, and the bar
// shrinks to fit.
type bar struct {
	w     io.Writer
	width func() int // the terminal's columns
	rate  rateWindow
	last  time.Time
	start time.Time
	now   func() time.Time
	pb    *progressbar.ProgressBar
	barW  int // the bar's width in columns, set when it is made
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
	b.draw(s, b.rate.perSecond(), now)
}

func (b *bar) Finish(s Status) {
	if s.Done == 0 && b.start.IsZero() {
		return // nothing ran, nothing was drawn
	}
	now := b.now()
	if b.start.IsZero() {
		b.start = now
	}
	b.draw(s, overall(s, now.Sub(b.start)), now)
	b.pb.Exit()
	fmt.Fprintln(b.w)
}

// Widths of the bar's parts other than the tail: the percent ("100% "), the bar's frame
// ("|" twice and a space), the count ("(240/240) ") and the cursor's column.
const barFrame = 5 + 3 + 1

// draw renders s: the bar is made at the first draw, when the total is known (-1, for stdin,
// gives a spinner), as wide as the terminal leaves room for.
func (b *bar) draw(s Status, rate float64, now time.Time) {
	width := b.width()
	count := len(fmt.Sprintf("(%d/%s) ", s.Done, totalText(s)))
	if b.pb == nil {
		b.barW = min(40, max(10, width-barFrame-count-len("0.0/s  eta 10s  reward 0.000, failed 0")))
		b.pb = progressbar.NewOptions(s.Total,
			progressbar.OptionSetWriter(b.w),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(false), // the ETA is ours, from the recent rate
			progressbar.OptionSetElapsedTime(false),
			progressbar.OptionSetWidth(b.barW),
			progressbar.OptionThrottle(0), // throttled here, so that the last draw always shows
			// No spinner ticker: with an unknown total the library would otherwise redraw from
			// a goroutine of its own every 100 ms, writing to w beside our own writes. Every
			// draw is ours; the spinner turns once per draw.
			progressbar.OptionSetSpinnerChangeInterval(0),
			progressbar.OptionShowDescriptionAtLineEnd(),
		)
	}
	room := width - barFrame - count
	if s.Total > 0 {
		room -= b.barW
	}
	b.pb.Describe(fit(tail(s, rate, now.Sub(b.start)), room))
	b.pb.Set(s.Done)
}

// tail is the bar's text after the count: rate, ETA (or the elapsed time), reward, failures.
func tail(s Status, rate float64, elapsed time.Duration) []string {
	parts := []string{fmt.Sprintf("%.1f/s", rate)}
	if eta := etaText(s, rate); eta != "" {
		parts = append(parts, eta)
	} else {
		parts = append(parts, "elapsed "+elapsed.Round(time.Second).String())
	}
	return append(parts, describe(s))
}

// fit joins parts with two spaces, leaving out parts from the end until the text fits width.
func fit(parts []string, width int) string {
	for len(parts) > 0 && len(strings.Join(parts, "  ")) > width {
		parts = parts[:len(parts)-1]
	}
	return strings.Join(parts, "  ")
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
