package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
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
// in the same order. It keeps no record: each side's Evaluator, each task's key once (sharing
// the record's strings), and 24 bytes per scored rollout (its task, repeat, reward and
// position), which Comparison sorts and pairs. It is not safe for concurrent use.
type Comparer struct {
	o       StatsOptions
	names   [2]string
	check   [2]keyCheck
	decided bool
	byIndex bool
	ev      [2]*Evaluator
	added   [2]int // records added per side
	// The tasks, numbered in the order first seen; seenBy has bit 1<<side for each side
	// that has a record of the task.
	taskOf map[taskKey]int32
	keys   []taskKey
	seenBy []uint8
	scored [2][]scoredRollout
	tasks  []TaskPairs
}

// scoredRollout is a scored rollout: its task's number, repeat, reward and position among
// its side's Adds.
type scoredRollout struct {
	rollout int64
	v       float64
	task    int32
	at      int32
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

// NewComparer returns an empty Comparer of sides named nameA and nameB.
func NewComparer(nameA, nameB string, o StatsOptions) *Comparer {
	o = o.normalized()
	c := &Comparer{o: o, names: [2]string{nameA, nameB}, taskOf: map[taskKey]int32{}}
	for i := range c.ev {
		c.ev[i] = NewEvaluator(o)
	}
	return c
}

// Reserve makes room for n records of side.
func (c *Comparer) Reserve(side, n int) {
	c.ev[side].Reserve(n)
	c.scored[side] = slices.Grow(c.scored[side], n)
}

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
	var k taskKey
	switch {
	case c.byIndex:
		k = taskKey{kind: 2, index: r.TaskIndex}
	case r.TaskID != "":
		k = taskKey{kind: 0, s: r.TaskID}
	case r.TaskHash != "":
		k = taskKey{kind: 1, s: r.TaskHash}
	default:
		k = taskKey{kind: 2, index: r.TaskIndex}
	}
	t, ok := c.taskOf[k]
	if !ok {
		t = int32(len(c.keys))
		c.taskOf[k] = t
		c.keys = append(c.keys, k)
		c.seenBy = append(c.seenBy, 0)
	}
	c.seenBy[t] |= 1 << side
	var v float64
	switch {
	case r.FailureClass == "" && r.HasReward:
		v = r.Reward
	case r.FailureClass != "" && c.o.ScoreFailuresAsZero:
	default:
		return
	}
	c.scored[side] = append(c.scored[side], scoredRollout{rollout: r.RolloutIndex, v: v, task: t, at: int32(at)})
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
	// Each side's scored rollouts by task and repeat; the first record of a (task, repeat) is
	// the one paired.
	var most float64 // the largest magnitude of a scored reward
	for s := range cp.scored {
		sc := cp.scored[s]
		slices.SortFunc(sc, func(a, b scoredRollout) int {
			return cmp.Or(cmp.Compare(a.task, b.task), cmp.Compare(a.rollout, b.rollout), cmp.Compare(a.at, b.at))
		})
		sc = slices.CompactFunc(sc, func(a, b scoredRollout) bool { return a.task == b.task && a.rollout == b.rollout })
		for _, r := range sc {
			most = max(most, math.Abs(r.v))
		}
		cp.scored[s] = sc
	}
	// Differences are taken of rewards divided by a power of two (exact), so that huge
	// finite rewards do not overflow; the results are multiplied back.
	scale := scaleFor(most)
	type taskPairs struct {
		n                   int
		sumA, sumB, sumDiff float64
		first               [2]int
	}
	tasks := make([]taskPairs, len(cp.keys))
	// Both sides are in (task, repeat) order: one merge pairs them, each task's lowest repeat
	// first.
	sa, sb := cp.scored[0], cp.scored[1]
	for i, j := 0, 0; i < len(sa) || j < len(sb); {
		var d int
		switch {
		case i == len(sa):
			d = 1
		case j == len(sb):
			d = -1
		default:
			d = cmp.Or(cmp.Compare(sa[i].task, sb[j].task), cmp.Compare(sa[i].rollout, sb[j].rollout))
		}
		switch {
		case d < 0:
			c.Unpaired++
			i++
			continue
		case d > 0:
			c.Unpaired++
			j++
			continue
		}
		a, b := &sa[i], &sb[j]
		tp := &tasks[a.task]
		if tp.n == 0 {
			tp.first = [2]int{int(a.at), int(b.at)}
		}
		tp.n++
		tp.sumA += a.v / scale
		tp.sumB += b.v / scale
		tp.sumDiff += b.v/scale - a.v/scale
		i++
		j++
	}
	var paired []int32
	for t, k := range cp.keys {
		switch seen := cp.seenBy[t]; {
		case seen == 1:
			c.OnlyA = append(c.OnlyA, k.String())
		case seen == 2:
			c.OnlyB = append(c.OnlyB, k.String())
		case tasks[t].n == 0:
			c.NoPairs = append(c.NoPairs, k.String())
		default:
			paired = append(paired, int32(t))
		}
	}
	for _, l := range [][]string{c.OnlyA, c.OnlyB, c.NoPairs} {
		slices.Sort(l)
	}
	cp.tasks = nil
	if len(paired) == 0 {
		return c
	}
	// Sums in the order of the task keys, so that the result does not depend on the order of
	// the records.
	names := make([]string, len(cp.keys))
	for _, t := range paired {
		names[t] = cp.keys[t].String()
	}
	slices.SortFunc(paired, func(a, b int32) int { return strings.Compare(names[a], names[b]) })
	clusters := make([]cluster, 0, len(paired))
	cp.tasks = make([]TaskPairs, 0, len(paired))
	var sumA, sumB, sumDiff float64
	for _, t := range paired {
		tp := &tasks[t]
		cp.tasks = append(cp.tasks, TaskPairs{Key: names[t], Pairs: tp.n, MeanA: tp.sumA / float64(tp.n) * scale,
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
	c.Tasks = len(paired)
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

// cost is what B costs against A in one line: the change of its mean tokens (prompt and
// completion) and of its mean latency per rollout, each side over its own rollouts with a
// reward; "" when a side has no such rollout.
func (c *Comparison) cost() string {
	a, b := &c.Sides[0], &c.Sides[1]
	ta, tb := a.MeanPromptTokens+a.MeanCompletionTokens, b.MeanPromptTokens+b.MeanCompletionTokens
	if ta <= 0 || tb <= 0 || a.MeanLatencyMs <= 0 || b.MeanLatencyMs <= 0 {
		return ""
	}
	return fmt.Sprintf("%s − %s: tokens %+.1f%% a rollout (%.1f vs %.1f), latency %+.1f%% (%.1f vs %.1f ms)",
		b.Scope, a.Scope, 100*(tb-ta)/ta, tb, ta, 100*(b.MeanLatencyMs-a.MeanLatencyMs)/a.MeanLatencyMs, b.MeanLatencyMs, a.MeanLatencyMs)
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
	if cost := c.cost(); cost != "" {
		fmt.Fprintln(w, cost)
	}
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
	fmt.Fprintf(w, "%s\n\n", c.headline())
	if cost := c.cost(); cost != "" {
		fmt.Fprintf(w, "%s\n\n", cost)
	}
	fmt.Fprintf(w, "%s.\n\n", c.method())
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
