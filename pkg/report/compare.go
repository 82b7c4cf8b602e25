package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Comparison pairs two sides (two runs, or two arms of one run) rollout by rollout: the same
// (task, repeat) on both sides (DESIGN §7).
type Comparison struct {
	// Sides are A and B's own statistics (Evaluate of each side, overall).
	Sides [2]Scores `json:"sides"`
	// Pairs counts the (task, repeat) pairs scored on both sides; Unpaired the scored
	// rollouts of either side without a partner.
	Pairs    int `json:"pairs"`
	Unpaired int `json:"unpaired"`
	// MeanDiff is the mean over the pairs of B's reward minus A's; StdErr its standard error
	// (over pairs); CI95 the 95% bootstrap interval with tasks resampled as clusters.
	MeanDiff float64   `json:"mean_diff"`
	StdErr   float64   `json:"std_err"`
	CI95     *Interval `json:"ci95,omitempty"`
	// Tasks compares each task's mean reward over its pairs: B above A (Won), below (Lost),
	// equal (Tied).
	Won  int `json:"tasks_won"`
	Lost int `json:"tasks_lost"`
	Tied int `json:"tasks_tied"`
}

// Compare pairs the records of side a with those of side b by (task index, rollout index)
// and computes the paired difference. Rollouts that failed are left out of the pairs unless
// o.ScoreFailuresAsZero. The sides' names are their Scopes (set by the caller through
// nameA, nameB).
func Compare(a, b []Record, nameA, nameB string, o StatsOptions) *Comparison {
	o = o.normalized()
	c := &Comparison{}
	for i, side := range [][]Record{a, b} {
		c.Sides[i] = Evaluate(side, o).Overall
		c.Sides[i].Scope = []string{nameA, nameB}[i]
	}
	type key struct{ task, rollout int64 }
	score := func(r *Record) (float64, bool) {
		switch {
		case r.FailureClass == "" && r.HasReward:
			return r.Reward, true
		case r.FailureClass != "" && o.ScoreFailuresAsZero:
			return 0, true
		}
		return 0, false
	}
	ra := map[key]float64{}
	for i := range a {
		if v, ok := score(&a[i]); ok {
			ra[key{a[i].TaskIndex, a[i].RolloutIndex}] = v
		}
	}
	type taskPairs struct {
		n          int
		sumA, sumB float64
	}
	tasks := map[int64]*taskPairs{}
	var diffs []float64
	paired := map[key]bool{}
	for i := range b {
		v, ok := score(&b[i])
		if !ok {
			continue
		}
		k := key{b[i].TaskIndex, b[i].RolloutIndex}
		av, ok := ra[k]
		if !ok || paired[k] {
			c.Unpaired++
			continue
		}
		paired[k] = true
		diffs = append(diffs, v-av)
		tp := tasks[k.task]
		if tp == nil {
			tp = &taskPairs{}
			tasks[k.task] = tp
		}
		tp.n++
		tp.sumA += av
		tp.sumB += v
	}
	c.Unpaired += len(ra) - len(paired)
	c.Pairs = len(diffs)
	if c.Pairs == 0 {
		return c
	}
	var sum float64
	for _, d := range diffs {
		sum += d
	}
	c.MeanDiff = sum / float64(c.Pairs)
	if c.Pairs > 1 {
		var ss float64
		for _, d := range diffs {
			ss += (d - c.MeanDiff) * (d - c.MeanDiff)
		}
		c.StdErr = math.Sqrt(ss/float64(c.Pairs-1)) / math.Sqrt(float64(c.Pairs))
	}
	ids := make([]int64, 0, len(tasks))
	for id := range tasks {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	clusters := make([]cluster, 0, len(ids))
	for _, id := range ids {
		tp := tasks[id]
		clusters = append(clusters, cluster{n: tp.n, sum: tp.sumB - tp.sumA})
		switch d := (tp.sumB - tp.sumA) / float64(tp.n); {
		case d > 1e-12:
			c.Won++
		case d < -1e-12:
			c.Lost++
		default:
			c.Tied++
		}
	}
	if o.Bootstrap > 0 {
		lo, hi := bootstrapCI(clusters, o.Bootstrap, o.Seed)
		c.CI95 = &Interval{Low: lo, High: hi}
	}
	return c
}

// WriteJSON writes the comparison as indented JSON.
func (c *Comparison) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(c)
}

// rows are the comparison's table: a metric per row, a column per side.
func (c *Comparison) rows() [][]string {
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
	side := func(label string, fn func(s *Scores) string) []string {
		return []string{label, fn(&c.Sides[0]), fn(&c.Sides[1])}
	}
	rows := [][]string{
		{"", c.Sides[0].Scope, c.Sides[1].Scope},
		side("rollouts", func(s *Scores) string { return strconv.Itoa(s.Rollouts) }),
		side("failed", func(s *Scores) string { return strconv.Itoa(s.Failed) }),
		side("mean reward", func(s *Scores) string { return f(s.MeanReward) }),
	}
	ks := map[int]bool{}
	for _, s := range c.Sides {
		for _, p := range s.PassAtK {
			ks[p.K] = true
		}
	}
	var kl []int
	for k := range ks {
		kl = append(kl, k)
	}
	sort.Ints(kl)
	for _, k := range kl {
		rows = append(rows, side(fmt.Sprintf("pass@%d", k), func(s *Scores) string {
			if p, ok := s.Pass(k); ok {
				return f(p.PassAt)
			}
			return "-"
		}))
	}
	rows = append(rows,
		side("mean rounds", func(s *Scores) string { return strconv.FormatFloat(s.MeanRounds, 'f', 2, 64) }),
		side("mean tool calls", func(s *Scores) string { return strconv.FormatFloat(s.MeanToolCalls, 'f', 2, 64) }),
		side("mean tokens (prompt+completion)", func(s *Scores) string {
			return strconv.FormatFloat(s.MeanPromptTokens+s.MeanCompletionTokens, 'f', 1, 64)
		}),
		side("mean latency ms", func(s *Scores) string { return strconv.FormatFloat(s.MeanLatencyMs, 'f', 1, 64) }),
		side("terminations", func(s *Scores) string { return countList(s.Terminations) }),
	)
	return rows
}

// headline is the paired result in one line.
func (c *Comparison) headline() string {
	if c.Pairs == 0 {
		return fmt.Sprintf("%s vs %s: no (task, repeat) scored on both sides", c.Sides[1].Scope, c.Sides[0].Scope)
	}
	ci := ""
	if c.CI95 != nil {
		ci = fmt.Sprintf(" (95%% CI %+.4f to %+.4f, tasks resampled)", c.CI95.Low, c.CI95.High)
	}
	return fmt.Sprintf("%s − %s: mean reward difference %+.4f ± %.4f%s over %d pairs; tasks won %d, lost %d, tied %d",
		c.Sides[1].Scope, c.Sides[0].Scope, c.MeanDiff, c.StdErr, ci, c.Pairs, c.Won, c.Lost, c.Tied)
}

// WriteText writes the headline and a side-by-side table.
func (c *Comparison) WriteText(w io.Writer) error {
	fmt.Fprintln(w, c.headline())
	if c.Unpaired > 0 {
		fmt.Fprintf(w, "(%d scored rollouts had no partner on the other side and are left out of the difference)\n", c.Unpaired)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range c.rows() {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// WriteMarkdown writes the headline and the table in Markdown.
func (c *Comparison) WriteMarkdown(w io.Writer) error {
	fmt.Fprintf(w, "%s\n\n", c.headline())
	rows := c.rows()
	fmt.Fprintf(w, "| metric | %s | %s |\n| --- | --- | --- |\n", rows[0][1], rows[0][2])
	for _, r := range rows[1:] {
		fmt.Fprintf(w, "| %s | %s | %s |\n", r[0], r[1], r[2])
	}
	return nil
}

// Write writes the comparison as "text", "json" or "markdown".
func (c *Comparison) Write(w io.Writer, format string) error {
	switch format {
	case "", "text":
		return c.WriteText(w)
	case "json":
		return c.WriteJSON(w)
	case "markdown", "md":
		return c.WriteMarkdown(w)
	}
	return fmt.Errorf("unknown format %q (text, json, markdown)", format)
}
