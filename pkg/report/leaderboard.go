package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/rollout-dev/rollout/pkg/record"
)

// LeaderRun is one run of a leaderboard: its name and its records, which the leaderboard
// reads several times (once for the run's statistics, twice per paired difference).
type LeaderRun struct {
	Name    string
	Records iter.Seq[*record.Record]
	// Status is the run's state when it is not a finished run ("incomplete: 171 of 480
	// rollouts"); "" for a finished one.
	Status string
}

// Leaderboard puts runs side by side: one row per run and arm, with the arm's statistics
// and the paired difference of its mean reward against the baseline run's arm of the same
// name (or the baseline's only arm).
type Leaderboard struct {
	Options  StatsOptions `json:"options"`
	Baseline string       `json:"baseline"`
	// K lists the k of pass@k over every row.
	K    []int       `json:"k"`
	Rows []LeaderRow `json:"rows"`
}

// LeaderRow is one run and arm of a leaderboard.
type LeaderRow struct {
	Run string `json:"run"`
	Arm string `json:"arm"`
	// Group is the value of the group-by field of a row of one group ("" for the arm's row).
	Group  string `json:"group,omitempty"`
	Status string `json:"status,omitempty"`
	Scores Scores `json:"scores"`
	// IsBaseline marks the rows of the baseline run; the others have VsBaseline.
	IsBaseline bool    `json:"is_baseline,omitempty"`
	VsBaseline *Versus `json:"vs_baseline,omitempty"`
}

// Versus is a row's paired difference against its baseline arm: the row's mean reward minus
// the baseline's over the (task, repeat) pairs scored on both, as Compare computes it.
type Versus struct {
	// Against names the baseline run and arm; empty with Note when there is none.
	Against  string    `json:"against,omitempty"`
	PairedBy string    `json:"paired_by,omitempty"`
	Pairs    int       `json:"pairs"`
	Tasks    int       `json:"tasks"`
	MeanDiff float64   `json:"mean_diff"`
	StdErr   float64   `json:"std_err"`
	CI95     *Interval `json:"ci95,omitempty"`
	// Note says why there is no difference: no baseline arm, no common task, no pair scored.
	Note string `json:"note,omitempty"`
}

// filter keeps the records of one arm.
func filter(recs iter.Seq[*record.Record], arm string) iter.Seq[*record.Record] {
	return func(yield func(*record.Record) bool) {
		for r := range recs {
			if r.Arm == arm && !yield(r) {
				return
			}
		}
	}
}

// NewLeaderboard evaluates each run and compares each arm of the other runs with the
// baseline run (an index into runs). With a group-by field, each arm's row is followed by
// one row per value of the field (without a paired difference). A group-by field that no
// record of any run has is an *UnknownFieldError.
func NewLeaderboard(runs []LeaderRun, baseline int, o StatsOptions) (*Leaderboard, error) {
	o = o.normalized()
	lb := &Leaderboard{Options: o, Baseline: runs[baseline].Name, Rows: []LeaderRow{}}
	evals := make([]*Evaluation, len(runs))
	seen, records := false, false
	known := map[string]bool{}
	for i, run := range runs {
		ev := NewEvaluator(o)
		n := 0
		for r := range run.Records {
			ev.Add(r)
			n++
		}
		records = records || n > 0
		var u *UnknownFieldError
		if err := ev.UnknownGroupBy(); errors.As(err, &u) {
			for _, k := range u.Known {
				known[k] = true
			}
		} else if n > 0 {
			seen = true
		}
		evals[i] = ev.Evaluation()
		for _, k := range evals[i].K {
			if !slices.Contains(lb.K, k) {
				lb.K = append(lb.K, k)
			}
		}
	}
	if o.GroupBy != "" && records && !seen {
		return nil, &UnknownFieldError{Field: o.GroupBy, Known: slices.Sorted(maps.Keys(known))}
	}
	slices.Sort(lb.K)
	baseArms := evals[baseline].ByArm
	for i, run := range runs {
		for _, s := range evals[i].ByArm {
			row := LeaderRow{Run: run.Name, Arm: s.Arm, Status: run.Status, Scores: s, IsBaseline: i == baseline}
			if i != baseline {
				row.VsBaseline = versus(runs[baseline], baseArms, run, s.Arm, o)
			}
			lb.Rows = append(lb.Rows, row)
			groups := evals[i].ByArmGroup
			if len(evals[i].ByArm) == 1 {
				groups = evals[i].ByGroup
			}
			for _, g := range groups {
				if g.Arm == "" || g.Arm == s.Arm {
					lb.Rows = append(lb.Rows, LeaderRow{Run: run.Name, Arm: s.Arm, Group: g.Group, Status: run.Status, Scores: g, IsBaseline: i == baseline})
				}
			}
		}
	}
	return lb, nil
}

// versus compares arm of run with the baseline's arm of the same name, or its only arm.
func versus(base LeaderRun, baseArms []Scores, run LeaderRun, arm string, o StatsOptions) *Versus {
	against := ""
	for _, s := range baseArms {
		if s.Arm == arm {
			against = arm
		}
	}
	if against == "" && len(baseArms) == 1 {
		against = baseArms[0].Arm
	}
	if against == "" {
		names := make([]string, len(baseArms))
		for i, s := range baseArms {
			names[i] = s.Arm
		}
		return &Versus{Note: fmt.Sprintf("the baseline has no arm %s (its arms: %s)", arm, strings.Join(names, ", "))}
	}
	name := base.Name + " " + against
	cp := NewComparer(name, run.Name+" "+arm, o)
	sides := [2]iter.Seq[*record.Record]{filter(base.Records, against), filter(run.Records, arm)}
	for s, recs := range sides {
		for r := range recs {
			cp.Check(s, r)
		}
	}
	for s, recs := range sides {
		for r := range recs {
			cp.Add(s, r)
		}
	}
	c := cp.Comparison()
	v := &Versus{Against: name, PairedBy: c.PairedBy, Pairs: c.Pairs, Tasks: c.Tasks, MeanDiff: c.MeanDiff, StdErr: c.StdErr, CI95: c.CI95}
	switch {
	case c.Pairs > 0:
	case c.Tasks == 0 && len(c.NoPairs) == 0:
		v.Note = "no task in common with the baseline"
	default:
		v.Note = "no (task, repeat) scored on both sides"
	}
	return v
}

// NoCommonTasks lists the rows that share no task with their baseline arm.
func (lb *Leaderboard) NoCommonTasks() []string {
	var out []string
	for _, r := range lb.Rows {
		if r.VsBaseline != nil && r.VsBaseline.Pairs == 0 && r.VsBaseline.Against != "" && r.Group == "" {
			out = append(out, r.Run+" "+r.Arm+": "+r.VsBaseline.Note)
		}
	}
	return out
}

// table is the leaderboard's rows as cells ("" printed as "-").
func (lb *Leaderboard) table() [][]string {
	head := []string{"run", "arm", "rollouts", "failed", "tasks", "mean reward", "95% CI"}
	for _, k := range lb.K {
		head = append(head, fmt.Sprintf("pass@%d", k))
	}
	head = append(head, "tokens/rollout", "latency ms", "vs baseline", "95% CI", "pairs")
	rows := [][]string{head}
	f4 := func(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
	for _, r := range lb.Rows {
		s := &r.Scores
		run := r.Run
		if r.Status != "" {
			run += " (" + r.Status + ")"
		}
		arm := r.Arm
		if r.Group != "" {
			arm += " " + lb.Options.GroupBy + "=" + r.Group
		}
		row := []string{run, arm, strconv.Itoa(s.Rollouts), strconv.Itoa(s.Failed), strconv.Itoa(s.Tasks), "", ""}
		if s.Scored > 0 {
			row[5] = f4(s.MeanReward)
			if s.CI95 != nil {
				row[6] = f4(s.CI95.Low) + " to " + f4(s.CI95.High)
				if s.CI95.Point {
					row[6] += " (point)"
				}
			}
		}
		for _, k := range lb.K {
			cell := ""
			if p, ok := s.Pass(k); ok {
				cell = f4(p.PassAt)
				if p.Tasks < s.TaskArms {
					cell += fmt.Sprintf(" (%d/%d)", p.Tasks, s.TaskArms)
				}
			}
			row = append(row, cell)
		}
		tokens, latency := "", ""
		if s.Rollouts > s.Failed {
			tokens = strconv.FormatFloat(s.MeanPromptTokens+s.MeanCompletionTokens, 'f', 1, 64)
			latency = strconv.FormatFloat(s.MeanLatencyMs, 'f', 1, 64)
		}
		row = append(row, tokens, latency)
		switch v := r.VsBaseline; {
		case r.Group != "":
			row = append(row, "", "", "")
		case r.IsBaseline:
			row = append(row, "baseline", "", "")
		case v.Pairs == 0:
			row = append(row, "none: "+v.Note, "", "0")
		default:
			ci := ""
			if v.CI95 != nil {
				ci = fmt.Sprintf("%+.4f to %+.4f", v.CI95.Low, v.CI95.High)
				if v.CI95.Point {
					ci += " (point)"
				}
			}
			row = append(row, fmt.Sprintf("%+.4f", v.MeanDiff), ci, strconv.Itoa(v.Pairs))
		}
		rows = append(rows, row)
	}
	return rows
}

func (lb *Leaderboard) method() string {
	ci := "95% CI: t over tasks"
	if lb.Options.CI == CIBootstrap {
		ci = "95% CI bootstrapped over tasks"
	}
	return fmt.Sprintf("one row per run and arm; vs baseline: the row's mean reward minus that of %s (the same arm, or its only arm), paired by task and repeat, %s; tokens/rollout and latency: means over the rollouts not failed", lb.Baseline, ci)
}

// WriteText writes the leaderboard as an aligned table.
func (lb *Leaderboard) WriteText(w io.Writer) error {
	fmt.Fprintln(w, lb.method())
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range lb.table() {
		for i, c := range row {
			if c == "" {
				c = "-"
			}
			if i > 0 {
				io.WriteString(tw, "\t")
			}
			io.WriteString(tw, c)
		}
		io.WriteString(tw, "\n")
	}
	return tw.Flush()
}

// WriteMarkdown writes the leaderboard as a Markdown table.
func (lb *Leaderboard) WriteMarkdown(w io.Writer) error {
	fmt.Fprintf(w, "%s.\n\n", lb.method())
	for i, row := range lb.table() {
		for j := range row {
			if row[j] == "" {
				row[j] = "-"
			}
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		if i == 0 {
			fmt.Fprintf(w, "|%s\n", strings.Repeat(" --- |", len(row)))
		}
	}
	return nil
}

// WriteJSON writes the leaderboard as indented JSON.
func (lb *Leaderboard) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(lb)
}

// Write writes the leaderboard as "text", "json" or "markdown" ("md").
func (lb *Leaderboard) Write(w io.Writer, format string) error { return write(w, lb, format) }
