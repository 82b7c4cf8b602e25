package report

import (
	"cmp"
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
	// interval over tasks: t by default, the bootstrap with StatsOptions.CI CIBootstrap.
	PairedMeans [2]float64 `json:"paired_means"`
	MeanDiff    float64    `json:"mean_diff"`
	StdErr      float64    `json:"std_err"`
	CI95        *Interval  `json:"ci95,omitempty"`
	// Tasks compares each task's mean reward over its pairs: B above A (Won), below (Lost),
	// equal (Tied).
	Won  int `json:"tasks_won"`
	Lost int `json:"tasks_lost"`
	Tied int `json:"tasks_tied"`
	// FailuresAsZero is the difference with the failed rollouts scored 0 (every record of
	// both sides paired), given when failures are left out of the difference above; which
	// biases it when the sides fail at different rates (their Failed / Rollouts).
	FailuresAsZero *PairedDiff `json:"failures_as_zero,omitempty"`
	// Tokens and LatencyMs are what B costs against A, paired: the mean over the pairs of
	// rollouts that both ended without failure of B's tokens (prompt and completion) or
	// latency minus A's, with its task-clustered std err and 95% CI.
	Tokens    *PairedDiff `json:"paired_tokens,omitempty"`
	LatencyMs *PairedDiff `json:"paired_latency_ms,omitempty"`
}

// PairedDiff is the mean over pairs of B's value minus A's: the sides' means over the pairs,
// the difference, its task-clustered std err, and its 95% CI (over tasks, as the reward
// difference's).
type PairedDiff struct {
	Pairs    int        `json:"pairs"`
	Tasks    int        `json:"tasks"`
	Means    [2]float64 `json:"means"`
	MeanDiff float64    `json:"mean_diff"`
	StdErr   float64    `json:"std_err"`
	CI95     *Interval  `json:"ci95,omitempty"`
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
// the record's strings), and 48 bytes per rollout with a reward or a failure (its task,
// repeat, reward, tokens, latency and position), which Comparison sorts and pairs. It is not
// safe for concurrent use.
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
// its side's Adds; its tokens and latency; failed marks a failed rollout kept (as reward 0)
// for Comparison.FailuresAsZero only, behaved one that ended without failure.
type scoredRollout struct {
	rollout         int64
	v               float64
	tokens, latency float64
	task            int32
	at              int32
	failed, behaved bool
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
	sr := scoredRollout{rollout: r.RolloutIndex, task: t, at: int32(at), tokens: float64(r.PromptTokens + r.CompletionTokens),
		latency: r.LatencyMs, behaved: r.FailureClass == "" && r.HasReward}
	switch {
	case r.FailureClass == "" && r.HasReward:
		sr.v = r.Reward
	case r.FailureClass != "":
		sr.failed = !c.o.ScoreFailuresAsZero // kept for FailuresAsZero only
	default:
		return
	}
	c.scored[side] = append(c.scored[side], sr)
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
	// the one paired. withFailed holds the failed ones too, as reward 0, for FailuresAsZero.
	var most float64 // the largest magnitude of a scored reward
	var withFailed [2][]scoredRollout
	for s := range cp.scored {
		sc := cp.scored[s]
		slices.SortFunc(sc, func(a, b scoredRollout) int {
			return cmp.Or(cmp.Compare(a.task, b.task), cmp.Compare(a.rollout, b.rollout), cmp.Compare(a.at, b.at))
		})
		withFailed[s] = slices.CompactFunc(slices.Clone(sc), func(a, b scoredRollout) bool { return a.task == b.task && a.rollout == b.rollout })
		sc = slices.DeleteFunc(sc, func(r scoredRollout) bool { return r.failed })
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
	least, most := math.Inf(1), math.Inf(-1) // the range of the differences, over scale
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
		diff := b.v/scale - a.v/scale
		tp.sumDiff += diff
		least, most = min(least, diff), max(most, diff)
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
	key := func(t int32) string { return cp.keys[t].String() }
	c.Tokens = pairedDiff(cp.scored, key, func(r *scoredRollout) float64 { return r.tokens }, true, o)
	c.LatencyMs = pairedDiff(cp.scored, key, func(r *scoredRollout) float64 { return r.latency }, true, o)
	if !o.ScoreFailuresAsZero && c.Sides[0].Failed*c.Sides[1].Rollouts != c.Sides[1].Failed*c.Sides[0].Rollouts {
		c.FailuresAsZero = pairedDiff(withFailed, key, func(r *scoredRollout) float64 { return r.v }, false, o)
	}
	c.PairedMeans, c.MeanDiff, c.StdErr, c.CI95 = clusteredDiff(clusters, c.Pairs, sumA, sumB, sumDiff, least, most, scale, o)
	return c
}

// clusteredDiff is what a paired difference reports from its per-task clusters of B − A and
// its sums over pairs, all divided by scale: the two sides' means, the mean difference, its
// task-clustered std err and (with o.Bootstrap) its 95% CI, back in the values' own scale;
// [least, most] is the range of the differences over scale.
func clusteredDiff(clusters []cluster, pairs int, sumA, sumB, sumDiff, least, most, scale float64, o StatsOptions) (means [2]float64, diff, stdErr float64, ci *Interval) {
	n := float64(pairs)
	mean := sumDiff / n
	if o.Bootstrap > 0 {
		ci = meanInterval(clusters, mean, least, most, false, o)
		ci.Low *= scale
		ci.High *= scale
	}
	return [2]float64{sumA / n * scale, sumB / n * scale}, mean * scale, clusteredStdErr(clusters, mean) * scale, ci
}

// pairedDiff is the mean over the pairs of sides (each sorted by task and repeat, one entry a
// (task, repeat)) of B's value minus A's, clustered by task: over the pairs whose rollouts both
// behaved when behavedOnly; nil without a pair. Tasks are taken in the order of their keys,
// so that the bootstrap does not depend on the order of the records.
func pairedDiff(sides [2][]scoredRollout, key func(task int32) string, value func(*scoredRollout) float64, behavedOnly bool, o StatsOptions) *PairedDiff {
	type acc struct {
		n                       int
		a, b, diff, least, most float64
	}
	byTask := map[int32]*acc{}
	sa, sb := sides[0], sides[1]
	var most float64
	for i, j := 0, 0; i < len(sa) && j < len(sb); {
		switch d := cmp.Or(cmp.Compare(sa[i].task, sb[j].task), cmp.Compare(sa[i].rollout, sb[j].rollout)); {
		case d < 0:
			i++
			continue
		case d > 0:
			j++
			continue
		}
		a, b := &sa[i], &sb[j]
		i++
		j++
		if behavedOnly && !(a.behaved && b.behaved) {
			continue
		}
		t := byTask[a.task]
		if t == nil {
			t = &acc{least: math.Inf(1), most: math.Inf(-1)}
			byTask[a.task] = t
		}
		va, vb := value(a), value(b)
		t.n++
		t.a += va
		t.b += vb
		t.diff += vb - va
		t.least, t.most = min(t.least, vb-va), max(t.most, vb-va)
		most = max(most, math.Abs(va), math.Abs(vb))
	}
	if len(byTask) == 0 {
		return nil
	}
	tasks := slices.Collect(maps.Keys(byTask))
	slices.SortFunc(tasks, func(x, y int32) int { return strings.Compare(key(x), key(y)) })
	scale := scaleFor(most)
	p := &PairedDiff{Tasks: len(tasks)}
	clusters := make([]cluster, len(tasks))
	var sumA, sumB, sumDiff float64
	least, most := math.Inf(1), math.Inf(-1)
	for i, t := range tasks {
		a := byTask[t]
		least, most = min(least, a.least/scale), max(most, a.most/scale)
		p.Pairs += a.n
		sumA += a.a / scale
		sumB += a.b / scale
		sumDiff += a.diff / scale
		clusters[i] = cluster{n: a.n, sum: a.diff / scale}
	}
	p.Means, p.MeanDiff, p.StdErr, p.CI95 = clusteredDiff(clusters, p.Pairs, sumA, sumB, sumDiff, least, most, scale, o)
	return p
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
				if p.Tasks < s.TaskArms {
					return fmt.Sprintf("%s (%d/%d tasks)", f(p.PassAt), p.Tasks, s.TaskArms)
				}
				return fmt.Sprintf("%s (%d tasks)", f(p.PassAt), p.Tasks)
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

// cost is what B costs against A in one line, paired: the mean over the pairs of rollouts
// that both ended without failure of B's tokens (prompt and completion) minus A's, and of its
// latency, each with its 95% CI and the sides' means over those pairs; "" without such a pair.
func (c *Comparison) cost() string {
	if c.Tokens == nil || c.LatencyMs == nil {
		return ""
	}
	one := func(what, unit string, p *PairedDiff) string {
		ci := ""
		if p.CI95 != nil {
			ci = fmt.Sprintf(", 95%% CI %+.1f to %+.1f", p.CI95.Low, p.CI95.High)
		}
		return fmt.Sprintf("%s %+.1f%s (std err %.1f%s; %.1f vs %.1f)", what, p.MeanDiff, unit, p.StdErr, ci, p.Means[1], p.Means[0])
	}
	return fmt.Sprintf("%s − %s a paired rollout (%d pairs without failure in %d tasks): %s, %s",
		c.Sides[1].Scope, c.Sides[0].Scope, c.Tokens.Pairs, c.Tokens.Tasks, one("tokens", "", c.Tokens), one("latency", " ms", c.LatencyMs))
}

// failureNote says, when the sides fail at different rates and failures are left out of the
// difference, that they do, and gives the difference with failures scored 0; "" otherwise.
func (c *Comparison) failureNote() string {
	p := c.FailuresAsZero
	if p == nil {
		return ""
	}
	rate := func(s *Scores) string {
		if s.Rollouts == 0 {
			return "no rollouts"
		}
		return fmt.Sprintf("%.1f%% (%d of %d)", 100*float64(s.Failed)/float64(s.Rollouts), s.Failed, s.Rollouts)
	}
	ci := ""
	if p.CI95 != nil {
		ci = fmt.Sprintf(", 95%% CI %+.4f to %+.4f", p.CI95.Low, p.CI95.High)
	}
	return fmt.Sprintf("the sides fail at different rates (%s %s, %s %s) and the difference above leaves failed rollouts out, which favours the side that fails more on hard tasks; with failures scored 0 the difference is %+.4f (std err %.4f%s) over %d pairs",
		c.Sides[0].Scope, rate(&c.Sides[0]), c.Sides[1].Scope, rate(&c.Sides[1]), p.MeanDiff, p.StdErr, ci, p.Pairs)
}

// method says how the tasks were paired and the numbers computed, in one line.
func (c *Comparison) method() string {
	ci := "no CI"
	if c.CI95 != nil {
		ci = map[string]string{"t": "95% CI: t over tasks", CIBootstrap: "95% CI: bootstrap over tasks"}[c.CI95.Method]
	}
	return fmt.Sprintf("paired by %s and repeat; std err clustered by task; %s", c.PairedBy, ci)
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
	if c.CI95 != nil && !c.CI95.Point && c.CI95.Method == CIBootstrap && c.Tasks < SmallTasks {
		out = append(out, smallTasksNote(c.Tasks))
	}
	return out
}

// WriteText writes the headline and a side-by-side table.
func (c *Comparison) WriteText(w io.Writer) error {
	fmt.Fprintln(w, c.headline())
	if n := c.failureNote(); n != "" {
		fmt.Fprintf(w, "warning: %s\n", n)
	}
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
	if n := c.failureNote(); n != "" {
		fmt.Fprintf(w, "**warning:** %s\n\n", n)
	}
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
