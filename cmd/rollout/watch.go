package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/rollout-dev/rollout/pkg/progress"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// failureWatch is an output that tells the terminal about failures while the run goes on: the
// first failure of each class is printed on stderr at once, with its error text (the URL and the
// endpoint's own message), and when the first earlyN rollouts all fail with the same class that
// --retry-failed runs again (record.FailureClass.Infra, cancelled aside) it calls stop, so that a run against a dead endpoint does not retry to
// the end of its input. Like every output it is written to by one goroutine.
type failureWatch struct {
	w      io.Writer
	tty    bool // w is a terminal: clear the progress bar's line before printing
	earlyN int  // 0: never stop early
	stop   func()

	seen map[record.FailureClass]bool
	n    int                 // records seen
	same record.FailureClass // the class every record so far has failed with ("" once one did not)

	stopped bool // stop was called: the first earlyN rollouts all failed with class same
}

func newFailureWatch(w io.Writer, earlyN int, stop func()) *failureWatch {
	return &failureWatch{w: w, tty: progress.IsTerminal(w), earlyN: earlyN, stop: stop, seen: map[record.FailureClass]bool{}}
}

func (f *failureWatch) Write(res *record.Result) error {
	r := &res.Record
	class := r.FailureClass
	if class != record.FailNone && !f.seen[class] {
		f.seen[class] = true
		if f.tty {
			io.WriteString(f.w, "\r\x1b[K")
		}
		fmt.Fprintf(f.w, "rollout: first %s failure (task %s, rollout %d, arm %s): %s\n", class, r.TaskID, r.RolloutIndex, r.Arm, record.Clip(r.Error, 500))
	}
	if f.stopped || f.earlyN <= 0 || f.n >= f.earlyN {
		return nil
	}
	f.n++
	switch {
	case f.n == 1 && class.Infra() && class != record.FailCancelled:
		f.same = class
	case class != f.same:
		f.same = ""
	}
	if f.n == f.earlyN && f.same != "" {
		f.stopped = true
		f.stop()
	}
	return nil
}

func (f *failureWatch) Close() error { return nil }

// failuresError: the run finished, but too many of its rollouts failed (or it stopped early).
// transient: every failure was of a transient class (record.FailureClass.Transient), so the
// run exits exitTransient, which a scheduler retries, rather than exitFailures.
type failuresError struct {
	msg       string
	transient bool
}

func (e failuresError) Error() string { return e.msg }

// failureLimit is --fail-on-error: a rate (below 1) or a count (1 or more) of failed rollouts
// that a sound run may have.
type failureLimit struct {
	v float64
}

func (l *failureLimit) String() string { return strconv.FormatFloat(l.v, 'g', -1, 64) }

func (l *failureLimit) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || (v >= 1 && v != float64(int64(v))) {
		return fmt.Errorf("want a rate below 1 (0.05: 5%% of rollouts) or a whole count (10), got %q", s)
	}
	l.v = v
	return nil
}

// exceeded says whether failed of rollouts passes the limit; a run in which every rollout
// failed always does.
func (l failureLimit) exceeded(failed, rollouts int) bool {
	if rollouts == 0 || failed == 0 {
		return false
	}
	if failed == rollouts {
		return true
	}
	if l.v >= 1 {
		return float64(failed) > l.v
	}
	return float64(failed) > l.v*float64(rollouts)
}

// checkFailures returns errFailures, with what failed, when the summary passes the limit.
func checkFailures(sum report.Summary, limit failureLimit, out string) error {
	if !limit.exceeded(sum.Failed, sum.Rollouts) {
		return nil
	}
	msg := fmt.Sprintf("%d of %d rollouts failed (%s), past --fail-on-error %s; the records are in %s", sum.Failed, sum.Rollouts, classList(sum.FailuresByClass), limit.String(), rundir.ParquetPath(out))
	retryable := 0
	transient := true
	for class, n := range sum.FailuresByClass {
		if record.FailureClass(class).Infra() {
			retryable += n
		}
		if n > 0 && !record.FailureClass(class).Transient() {
			transient = false
		}
	}
	if retryable > 0 {
		msg += fmt.Sprintf(". Fix the cause, then run the %d failed rollouts again (the others are kept): rollout run --resume --retry-failed --out %s", retryable, out)
	}
	if transient {
		msg += "; every failure is transient (exit 5): the same command with --resume=auto runs them again"
	}
	return failuresError{msg: msg, transient: transient}
}

// classList is "model_unavailable 240, timeout 2", by count then name.
func classList(m map[string]int) string {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b))
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
