package report

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/rollout-dev/rollout/pkg/record"
)

// Comparison pairs two sides (two runs, or two arms of one run) rollout by rollout: the same
// task (by its key, see TaskKey) and repeat on both sides.
type Comparison struct {
	// Sides are A and B's own statistics (Evaluate of each side, overall).
	Sides [2]Scores `json:"sides"`
	// PairedBy says how tasks were matched: "task id" (the rows' id field), "task id or row
	// hash" (the id, or for rows without one their content's hash), or "task index" (the row's
	// position in its task file, when a record has neither, as in older runs, or a key names
	// two tasks).
	PairedBy string `json:"paired_by"`
	// Pairs counts the (task, repeat) pairs scored on both sides; Unpaired the scored
	// rollouts of either side without a partner. Tasks counts the tasks with a pair.
	Pairs    int `json:"pairs"`
	Unpaired int `json:"unpaired"`
	Tasks    int `json:"tasks"`
	// OnlyA and OnlyB list the keys of the tasks that have records on one side only;
	// NoPairs those on both sides without a (task, repeat) scored on both (every rollout of
	// one side failed, say). None of them is in the difference or the tasks won, lost, tied.
	OnlyA   []string `json:"tasks_only_in_a"`
	OnlyB   []string `json:"tasks_only_in_b"`
	NoPairs []string `json:"tasks_without_pairs"`
	// PairedMeans are A's and B's mean rewards over the pairs only: MeanDiff is their
	// difference, the mean over the pairs of B's reward minus A's. StdErr is its task-clustered
	// standard error (the formula of Scores.StdErr, over the pairs' differences); CI95 the 95%
	// bootstrap interval with tasks resampled as clusters.
	PairedMeans [2]float64 `json:"paired_means"`
	MeanDiff    float64    `json:"mean_diff"`
	StdErr      float64    `json:"std_err"`
	CI95        *Interval  `json:"ci95,omitempty"`
	// Tasks compares each task's mean reward over its pairs: B above A (Won), below (Lost),
	// equal (Tied).
	Won  int `json:"tasks_won"`
	Lost int `json:"tasks_lost"`
	Tied int `json:"tasks_tied"`
}

// TaskKey is what a record's task is known by across runs: "id:" and the row's id, else
// "row:" and the hash of the row's content (Record.TaskHash), else, or when byIndex,
// "index:" and its position in its task file.
func TaskKey(r *record.Record, byIndex bool) string {
	switch {
	case byIndex:
	case r.TaskID != "":
		return "id:" + r.TaskID
	case r.TaskHash != "":
		return "row:" + r.TaskHash
	}
	return "index:" + strconv.FormatInt(r.TaskIndex, 10)
}

// keyCheck decides, a record at a time, whether a side's task keys are usable for pairing:
// every record has a task id or row hash, and each such key belongs to one task (source file
// and index); hashed says whether a key is a hash.
type keyCheck struct {
	owner       map[taskKey]keyOwner
	bad, hashed bool
}

// keyOwner is the task a key was first seen on.
type keyOwner struct {
	src   string
	index int64
}

func (k *keyCheck) add(r *record.Record) {
	if k.bad {
		return
	}
	var key taskKey
	switch {
	case r.TaskID != "":
		key = taskKey{kind: 0, s: r.TaskID}
	case r.TaskHash != "":
		key, k.hashed = taskKey{kind: 1, s: r.TaskHash}, true
	default:
		k.bad = true
		return
	}
	if k.owner == nil {
		k.owner = map[taskKey]keyOwner{}
	}
	t := keyOwner{r.SourceFile, r.TaskIndex}
	if o, seen := k.owner[key]; seen && o != t {
		k.bad = true
		return
	}
	k.owner[key] = t
}

// Compare pairs the records of side a with those of side b by task key and rollout index, and
// computes the paired difference. Tasks are matched by id (by the row's hash for a row
// without id) when every record of both sides has one and no key names two tasks; else by
// index. Rollouts that failed are left out of the
// pairs unless o.ScoreFailuresAsZero. The sides' names are their Scopes (set by the caller
// through nameA, nameB).
func Compare(a, b []record.Record, nameA, nameB string, o StatsOptions) *Comparison {
	c := NewComparer(nameA, nameB, o)
	for i, side := range [][]record.Record{a, b} {
		for j := range side {
			c.Check(i, &side[j])
		}
	}
	for i, side := range [][]record.Record{a, b} {
		for j := range side {
			c.Add(i, &side[j])
		}
	}
	return c.Comparison()
}

// Comparer computes what Compare does from records given one at a time, in two passes: Check
// every record of both sides (which decides how tasks are paired), then Add every record again
// in the same order. It keeps no record: each side's Evaluator and, per scored rollout, its task
// key (sharing the record's strings), reward and position. It is not safe for concurrent use.
type Comparer struct {
	o       StatsOptions
	names   [2]string
	check   [2]keyCheck
	decided bool
	byIndex bool
	ev      [2]*Evaluator
	added   [2]int // records added per side
	scored  [2]map[pairKey]scoredAt
	seen    [2]map[taskKey]bool
	most    float64 // the largest magnitude of a scored reward
	tasks   []TaskPairs
}

// scoredAt is a scored rollout: its reward and its position among its side's Adds.
type scoredAt struct {
	v  float64
	at int
}

// TaskPairs is a task's pairs, as Comparer.Tasks gives them.
type TaskPairs struct {
	Key          string // TaskKey
	Pairs        int
	MeanA, MeanB float64 // the sides' mean rewards over the pairs
	// First are the positions, among each side's Adds, of the records of the task's lowest
	// paired repeat.
	First [2]int
}

// taskKey is TaskKey without its string: kind 0 an id, 1 a row hash, 2 an index.
type taskKey struct {
	kind  uint8
	s     string
	index int64
}

func (k taskKey) String() string {
	switch k.kind {
	case 0:
		return "id:" + k.s
	case 1:
		return "row:" + k.s
	}
	return "index:" + strconv.FormatInt(k.index, 10)
}

// pairKey is a (task, repeat).
type pairKey struct {
	task    taskKey
	rollout int64
}

// NewComparer returns an empty Comparer of sides named nameA and nameB.
func NewComparer(nameA, nameB string, o StatsOptions) *Comparer {
	o = o.normalized()
	c := &Comparer{o: o, names: [2]string{nameA, nameB}}
	for i := range c.ev {
		c.ev[i] = NewEvaluator(o)
		c.scored[i], c.seen[i] = map[pairKey]scoredAt{}, map[taskKey]bool{}
	}
	return c
}

// Reserve makes room for n records of side.
func (c *Comparer) Reserve(side, n int) { c.ev[side].Reserve(n) }

// Check notes the task key of a record of side (0 for A, 1 for B). Every record is checked
// before the first Add; a Check after it panics.
func (c *Comparer) Check(side int, r *record.Record) {
	if c.decided {
		panic("report: Comparer.Check after Add")
	}
	c.check[side].add(r)
}

// Add counts a record of side (0 for A, 1 for B).
func (c *Comparer) Add(side int, r *record.Record) {
	if !c.decided {
		c.decided, c.byIndex = true, c.check[0].bad || c.check[1].bad
	}
	c.ev[side].Add(r)
	at := c.added[side]
	c.added[side]++
	k := pairKey{rollout: r.RolloutIndex}
	switch {
	case c.byIndex:
		k.task = taskKey{kind: 2, index: r.TaskIndex}
	case r.TaskID != "":
		k.task = taskKey{kind: 0, s: r.TaskID}
	case r.TaskHash != "":
		k.task = taskKey{kind: 1, s: r.TaskHash}
	default:
		k.task = taskKey{kind: 2, index: r.TaskIndex}
	}
	c.seen[side][k.task] = true
	var v float64
	switch {
	case r.FailureClass == "" && r.HasReward:
		v = r.Reward
	case r.FailureClass != "" && c.o.ScoreFailuresAsZero:
	default:
		return
	}
	if _, dup := c.scored[side][k]; dup {
		return // the first record of a (task, repeat) is the one paired
	}
	c.scored[side][k] = scoredAt{v, at}
	c.most = max(c.most, math.Abs(v))
}

// Comparison is the comparison of the records added.
func (cp *Comparer) Comparison() *Comparison {
	o := cp.o
	c := &Comparison{OnlyA: []string{}, OnlyB: []string{}, NoPairs: []string{}}
	for i := range cp.ev {
		c.Sides[i] = cp.ev[i].Evaluation().Overall
		c.Sides[i].Scope = cp.names[i]
	}
	switch {
	case cp.check[0].bad || cp.check[1].bad:
		c.PairedBy = "task index"
	case cp.check[0].hashed || cp.check[1].hashed:
		c.PairedBy = "task id or row hash"
	default:
		c.PairedBy = "task id"
	}
	scored, seen := cp.scored, cp.seen
	// Differences are taken of rewards divided by a power of two (exact), so that huge
	// finite rewards do not overflow; the results are multiplied back.
	scale := scaleFor(cp.most)
	type taskPairs struct {
		n                   int
		sumA, sumB, sumDiff float64
		firstRep            int64
		first               [2]int
	}
	tasks := map[taskKey]*taskPairs{}
	for k, a := range scored[0] {
		b, ok := scored[1][k]
		if !ok {
			c.Unpaired++
			continue
		}
		va, vb := a.v, b.v
		tp := tasks[k.task]
		if tp == nil {
			tp = &taskPairs{firstRep: math.MaxInt64}
			tasks[k.task] = tp
		}
		tp.n++
		tp.sumA += va / scale
		tp.sumB += vb / scale
		tp.sumDiff += vb/scale - va/scale
		if k.rollout < tp.firstRep {
			tp.firstRep, tp.first = k.rollout, [2]int{a.at, b.at}
		}
	}
	for k := range scored[1] {
		if _, ok := scored[0][k]; !ok {
			c.Unpaired++
		}
	}
	for t := range seen[0] {
		switch {
		case !seen[1][t]:
			c.OnlyA = append(c.OnlyA, t.String())
		case tasks[t] == nil:
			c.NoPairs = append(c.NoPairs, t.String())
		}
	}
	for t := range seen[1] {
		if !seen[0][t] {
			c.OnlyB = append(c.OnlyB, t.String())
		}
	}
	for _, l := range [][]string{c.OnlyA, c.OnlyB, c.NoPairs} {
		slices.Sort(l)
	}
	if len(tasks) == 0 {
		return c
	}
	// Sums in the order of the task keys, so that the result does not depend on the maps'.
	byName := make(map[string]*taskPairs, len(tasks))
	for k, tp := range tasks {
		byName[k.String()] = tp
	}
	ids := slices.Sorted(maps.Keys(byName))
	clusters := make([]cluster, 0, len(ids))
	cp.tasks = make([]TaskPairs, 0, len(ids))
	var sumA, sumB, sumDiff float64
	for _, id := range ids {
		tp := byName[id]
		cp.tasks = append(cp.tasks, TaskPairs{Key: id, Pairs: tp.n, MeanA: tp.sumA / float64(tp.n) * scale,
			MeanB: tp.sumB / float64(tp.n) * scale, First: tp.first})
		c.Pairs += tp.n
		sumA += tp.sumA
		sumB += tp.sumB
		sumDiff += tp.sumDiff
		clusters = append(clusters, cluster{n: tp.n, sum: tp.sumDiff})
		switch d := tp.sumDiff / float64(tp.n); {
		case d > 1e-12/scale:
			c.Won++
		case d < -1e-12/scale:
			c.Lost++
		default:
			c.Tied++
		}
	}
	c.Tasks = len(ids)
	n := float64(c.Pairs)
	mean := sumDiff / n
	c.PairedMeans = [2]float64{sumA / n * scale, sumB / n * scale}
	c.MeanDiff = mean * scale
	c.StdErr = clusteredStdErr(clusters, mean) * scale
	if o.Bootstrap > 0 {
		lo, hi := bootstrapCI(clusters, o.Bootstrap, o.Seed)
		c.CI95 = &Interval{Low: lo * scale, High: hi * scale, Point: lo == hi}
	}
	return c
}

// Tasks are the tasks with pairs, in key order, once Comparison was called.
func (c *Comparer) Tasks() []TaskPairs { return c.tasks }

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
		{"mean reward over the pairs", f(c.PairedMeans[0]), f(c.PairedMeans[1])},
		side("tasks", func(s *Scores) string { return strconv.Itoa(s.Tasks) }),
		side("tasks whose rollouts all failed", func(s *Scores) string { return strconv.Itoa(s.TasksAllFailed) }),
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
		ci = fmt.Sprintf(", 95%% CI %+.4f to %+.4f", c.CI95.Low, c.CI95.High)
		if c.CI95.Point {
			ci += ", a point: every task has the same difference"
		}
	}
	return fmt.Sprintf("%s − %s: mean reward difference %+.4f (std err %.4f%s) over %d pairs in %d tasks; tasks won %d, lost %d, tied %d",
		c.Sides[1].Scope, c.Sides[0].Scope, c.MeanDiff, c.StdErr, ci, c.Pairs, c.Tasks, c.Won, c.Lost, c.Tied)
}

// method says how the tasks were paired and the numbers computed, in one line.
func (c *Comparison) method() string {
	return fmt.Sprintf("paired by %s and repeat; std err clustered by task; 95%% CI: bootstrap over tasks", c.PairedBy)
}

// notes are the warnings under the headline: tasks and rollouts left out of the difference.
func (c *Comparison) notes() []string {
	var out []string
	list := func(keys []string) string {
		if len(keys) > maxListed {
			return strings.Join(keys[:maxListed], ", ") + fmt.Sprintf(" and %d more (see --format json)", len(keys)-maxListed)
		}
		return strings.Join(keys, ", ")
	}
	for i, only := range [][]string{c.OnlyA, c.OnlyB} {
		if len(only) > 0 {
			out = append(out, fmt.Sprintf("the task sets differ: %d tasks only in %s: %s", len(only), c.Sides[i].Scope, list(only)))
		}
	}
	if len(c.NoPairs) > 0 {
		out = append(out, fmt.Sprintf("%d tasks have no repeat scored on both sides (their rollouts failed): %s", len(c.NoPairs), list(c.NoPairs)))
	}
	if c.Unpaired > 0 {
		out = append(out, fmt.Sprintf("%d scored rollouts had no partner on the other side and are left out of the difference", c.Unpaired))
	}
	return out
}

// WriteText writes the headline and a side-by-side table.
func (c *Comparison) WriteText(w io.Writer) error {
	fmt.Fprintln(w, c.headline())
	fmt.Fprintln(w, c.method())
	for _, n := range c.notes() {
		fmt.Fprintf(w, "warning: %s\n", n)
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
	fmt.Fprintf(w, "%s\n\n%s.\n\n", c.headline(), c.method())
	if notes := c.notes(); len(notes) > 0 {
		for _, n := range notes {
			fmt.Fprintf(w, "- warning: %s\n", n)
		}
		fmt.Fprintln(w)
	}
	rows := c.rows()
	fmt.Fprintf(w, "| metric | %s | %s |\n| --- | --- | --- |\n", rows[0][1], rows[0][2])
	for _, r := range rows[1:] {
		fmt.Fprintf(w, "| %s | %s | %s |\n", r[0], r[1], r[2])
	}
	return nil
}

// Write writes the comparison as "text", "json" or "markdown" ("md").
func (c *Comparison) Write(w io.Writer, format string) error { return write(w, c, format) }
