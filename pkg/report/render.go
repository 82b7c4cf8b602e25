package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes e as indented JSON.
func (e *Evaluation) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// scopes lists every Scores of e in printing order.
func (e *Evaluation) scopes() []*Scores {
	out := []*Scores{&e.Overall}
	// One arm: its row would repeat the overall one.
	if len(e.ByArm) > 1 {
		for i := range e.ByArm {
			out = append(out, &e.ByArm[i])
		}
	}
	for i := range e.ByGroup {
		out = append(out, &e.ByGroup[i])
	}
	for i := range e.ByArmGroup {
		out = append(out, &e.ByArmGroup[i])
	}
	return out
}

// method describes how the numbers were computed, in one line.
func (e *Evaluation) method() string {
	o := e.Options
	var b strings.Builder
	fmt.Fprintf(&b, "success: reward >= %s; ", fmtNum(o.Threshold))
	if o.ScoreFailuresAsZero {
		b.WriteString("failed rollouts scored as 0; ")
	} else {
		b.WriteString("failed rollouts left out of the scores; ")
	}
	b.WriteString("std err: clustered by task; ")
	methods := map[string]bool{}
	normal := false
	for _, sc := range e.scopes() {
		if sc.CI95 != nil {
			methods[sc.CI95.Method] = true
			normal = normal || sc.CI95.Normal
		}
	}
	b.WriteString(ciMethodText(o, methods, normal))
	if len(e.K) > 1 {
		if o.PassKCommonTasks {
			fmt.Fprintf(&b, "; pass@k: every k over the tasks with at least %d scored rollouts", e.K[len(e.K)-1])
		} else {
			b.WriteString("; pass@k: each k over the tasks with at least k scored rollouts")
		}
	}
	return b.String()
}

// maxListed is how many tasks a note lists by name.
const maxListed = 10

// notes are the warnings under the tables: pass@k over fewer tasks than the scope has, tasks
// whose rollouts all failed, intervals that are a point.
func (e *Evaluation) notes() []string {
	var out []string
	point, partial := false, false
	for _, s := range e.scopes() {
		if s.TasksAllFailed > 0 {
			var names []string
			for _, t := range s.AllFailedTasks[:min(len(s.AllFailedTasks), maxListed)] {
				names = append(names, fmt.Sprintf("%s task %d", t.SourceFile, t.TaskIndex))
			}
			if len(s.AllFailedTasks) > maxListed {
				names = append(names, fmt.Sprintf("and %d more (see the JSON output)", len(s.AllFailedTasks)-maxListed))
			}
			what := "are in no score"
			if e.Options.ScoreFailuresAsZero {
				what = "are scored as 0"
			}
			out = append(out, fmt.Sprintf("%s: %d tasks had every rollout fail and %s: %s", s.Scope, s.TasksAllFailed, what, strings.Join(names, ", ")))
		}
		var short []string
		for _, p := range s.PassAtK {
			if p.Tasks < s.TaskArms {
				short = append(short, fmt.Sprintf("pass@%d over %d", p.K, p.Tasks))
			}
		}
		if len(short) > 0 {
			what := "tasks"
			if s.Arm == "" && len(e.ByArm) > 1 {
				what = "(task, arm) pairs"
			}
			out = append(out, fmt.Sprintf("%s: pass@k and pass^k rest on fewer than its %d %s: %s", s.Scope, s.TaskArms, what, strings.Join(short, ", ")))
			partial = true
		}
		point = point || s.CI95 != nil && s.CI95.Point
	}
	if partial {
		if e.Options.PassKCommonTasks {
			out = append(out, fmt.Sprintf("every k is over the tasks with at least %d scored rollouts (--pass-k-common-tasks); the others have failed rollouts", e.K[len(e.K)-1]))
		} else {
			out = append(out, "a k is over the tasks with at least k scored rollouts, and differs from k to k when rollouts failed: --score-failures-as-zero counts failed rollouts as failed tries, --pass-k-common-tasks puts every k on the same tasks")
		}
	}
	if point {
		out = append(out, "a 95% CI marked (point) is a single point: every task of its scope has the same mean reward (or there is one task), so it says nothing of the uncertainty")
	}
	if o := &e.Overall; o.CI95 != nil && !o.CI95.Point && o.CI95.Method == CIBootstrap && o.Tasks < SmallTasks {
		out = append(out, smallTasksNote(o.Tasks))
	}
	return out
}

// smallTasksNote warns that a bootstrap 95% CI over tasks tasks (under SmallTasks) is too
// narrow, with the coverage TestIntervalCoverage measured.
func smallTasksNote(tasks int) string {
	return fmt.Sprintf("%d tasks: under %d the bootstrap 95%% CI covers less than 95%% of the time (measured: 0.88-0.92 at 3-10 tasks of a symmetric mean, 0.56-0.78 when most tasks score near 0; the default --ci auto does not: docs/statistics.md)", tasks, SmallTasks)
}

// ciMethodText says in a few words how the 95% CIs were computed, from the options and the
// methods the intervals have (Interval.Method) and whether one is normal.
func ciMethodText(o StatsOptions, methods map[string]bool, normal bool) string {
	if o.Bootstrap <= 0 {
		return "no CI"
	}
	if o.CI == CIBootstrap {
		t := fmt.Sprintf("95%% CI: bootstrap over tasks, %d resamples, seed %d", o.Bootstrap, o.Seed)
		if methods["wilson"] {
			t += " (Wilson score where every reward is 0 or every one is 1)"
		}
		if normal {
			t += fmt.Sprintf(" (normal, task-clustered, in scopes of over %d tasks)", BootstrapMaxTasks)
		}
		return t
	}
	switch {
	case methods["wilson"] && methods["t"]:
		return "95% CI: Wilson score over tasks where every value is in [0, 1], t otherwise (task-clustered)"
	case methods["t"]:
		return "95% CI: t over tasks (task-clustered std err, tasks - 1 df)"
	default:
		return "95% CI: Wilson score over tasks (task-clustered effective sample size)"
	}
}

func fmtNum(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// table is the two tables of the printers: the scores, then the behaviour. A cell "" is
// printed as "-".
func (e *Evaluation) table() (scores, behaviour [][]string) {
	head := []string{"scope", "rollouts", "failed", "scored", "tasks", "mean reward", "std err", "95% CI"}
	for _, k := range e.K {
		head = append(head, fmt.Sprintf("pass@%d", k))
	}
	for _, k := range e.K {
		if k > 1 {
			head = append(head, fmt.Sprintf("pass^%d", k))
		}
	}
	scores = append(scores, head)
	behaviour = append(behaviour, []string{"scope", "mean rounds", "mean tool calls", "tool errors", "mean prompt tokens", "mean completion tokens", "mean latency ms", "failures", "terminations"})
	f4 := func(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
	for _, s := range e.scopes() {
		row := []string{s.Scope, strconv.Itoa(s.Rollouts), strconv.Itoa(s.Failed), strconv.Itoa(s.Scored), strconv.Itoa(s.Tasks), "", "", ""}
		if s.TasksAllFailed > 0 {
			if e.Options.ScoreFailuresAsZero {
				row[4] += fmt.Sprintf(" (%d all failed)", s.TasksAllFailed) // among the tasks, scored as 0
			} else {
				row[4] += fmt.Sprintf(" (+%d all failed)", s.TasksAllFailed)
			}
		}
		if s.Scored > 0 {
			row[5] = f4(s.MeanReward)
			if s.Tasks > 1 {
				row[6] = f4(s.StdErr)
			}
			if s.CI95 != nil {
				row[7] = f4(s.CI95.Low) + " to " + f4(s.CI95.High)
				if s.CI95.Point {
					row[7] += " (point)"
				}
			}
		}
		// A pass@k over fewer tasks than the scope's says how many.
		pass := func(p PassAtK, x float64) string {
			if p.Tasks < s.TaskArms {
				return fmt.Sprintf("%s (%d/%d)", f4(x), p.Tasks, s.TaskArms)
			}
			return f4(x)
		}
		for _, k := range e.K {
			if p, ok := s.Pass(k); ok {
				row = append(row, pass(p, p.PassAt))
			} else {
				row = append(row, "")
			}
		}
		for _, k := range e.K {
			if k == 1 {
				continue
			}
			if p, ok := s.Pass(k); ok {
				row = append(row, pass(p, p.PassHat))
			} else {
				row = append(row, "")
			}
		}
		scores = append(scores, row)
		b := []string{s.Scope, "", "", strconv.FormatInt(s.ToolErrors, 10), "", "", "", countList(s.FailuresByClass), countList(s.Terminations)}
		if s.Rollouts > s.Failed {
			b[1] = strconv.FormatFloat(s.MeanRounds, 'f', 2, 64)
			b[2] = strconv.FormatFloat(s.MeanToolCalls, 'f', 2, 64)
			b[4] = strconv.FormatFloat(s.MeanPromptTokens, 'f', 1, 64)
			b[5] = strconv.FormatFloat(s.MeanCompletionTokens, 'f', 1, 64)
			b[6] = strconv.FormatFloat(s.MeanLatencyMs, 'f', 1, 64)
		}
		behaviour = append(behaviour, b)
	}
	return scores, behaviour
}

// WriteMethod writes the line that says how the numbers were computed, and the notes (see
// WriteText), without the tables.
func (e *Evaluation) WriteMethod(w io.Writer) error {
	var b strings.Builder
	b.WriteString(e.method() + "\n")
	for _, n := range e.notes() {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteText writes e as aligned tables for a terminal.
func (e *Evaluation) WriteText(w io.Writer) error {
	scores, behaviour := e.table()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\n", e.method())
	for _, t := range [][][]string{scores, behaviour} {
		fmt.Fprintln(tw)
		for _, row := range t {
			for i, c := range row {
				if c == "" {
					c = "-"
				}
				if i > 0 {
					tw.Write([]byte{'\t'})
				}
				io.WriteString(tw, c)
			}
			tw.Write([]byte{'\n'})
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if notes := e.notes(); len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			if _, err := fmt.Fprintf(w, "note: %s\n", n); err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteMarkdown writes e as Markdown tables.
func (e *Evaluation) WriteMarkdown(w io.Writer) error {
	scores, behaviour := e.table()
	var b strings.Builder
	fmt.Fprintf(&b, "%s.\n", e.method())
	for ti, t := range [][][]string{scores, behaviour} {
		b.WriteByte('\n')
		for i, row := range t {
			b.WriteString("|")
			for _, c := range row {
				if c == "" {
					c = "-"
				}
				b.WriteString(" " + strings.ReplaceAll(c, "|", `\|`) + " |")
			}
			b.WriteByte('\n')
			if i == 0 {
				b.WriteString("|")
				for j := range row {
					if j == 0 || ti == 1 && j >= len(row)-2 {
						b.WriteString(" --- |") // text: scope, failures, terminations
					} else {
						b.WriteString(" ---: |")
					}
				}
				b.WriteByte('\n')
			}
		}
	}
	if notes := e.notes(); len(notes) > 0 {
		b.WriteByte('\n')
		for _, n := range notes {
			fmt.Fprintf(&b, "- note: %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// errFormat names the formats of Write.
var errFormat = errors.New(`format: want text, json or markdown`)

// rendering is a result that writes itself in each of Write's formats.
type rendering interface {
	WriteText(io.Writer) error
	WriteJSON(io.Writer) error
	WriteMarkdown(io.Writer) error
}

// write writes r in a format: "text" (also ""), "json" or "markdown" ("md").
func write(w io.Writer, r rendering, format string) error {
	switch format {
	case "text", "":
		return r.WriteText(w)
	case "json":
		return r.WriteJSON(w)
	case "markdown", "md":
		return r.WriteMarkdown(w)
	}
	return fmt.Errorf("%w, not %q", errFormat, format)
}

// Write writes e in a format: "text", "json" or "markdown" ("md").
func (e *Evaluation) Write(w io.Writer, format string) error { return write(w, e, format) }
