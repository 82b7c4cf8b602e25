package report

// The Evaluator as it was before its rows shrank (kept to check, on random records, that
// the new one gives the same Evaluation, bit for bit).

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"github.com/rollout-dev/rollout/pkg/record"
)

// oldEvaluator collects records, keeping a few numbers of each (not the records), for an
// Evaluation. It is not safe for concurrent use.
type oldEvaluator struct {
	o    StatsOptions
	rows []oldEvalRow
	// Interned strings: sources, arms, groups, failure classes, terminations.
	names []string
	index map[string]int32
}

// oldEvalRow is what the statistics need of one record.
type oldEvalRow struct {
	task, rollout                  int64
	src, arm, group, failure, term int32 // indices into names; failure −1 when none
	hasReward                      bool
	reward                         float64
	rounds, toolCalls, toolErrors  int32
	promptTokens, completionTokens int64
	latencyMs                      float64
}

// newOldEvaluator returns an empty oldEvaluator.
func newOldEvaluator(o StatsOptions) *oldEvaluator {
	return &oldEvaluator{o: o.normalized(), index: map[string]int32{}}
}

func (e *oldEvaluator) intern(s string) int32 {
	if i, ok := e.index[s]; ok {
		return i
	}
	i := int32(len(e.names))
	e.names = append(e.names, s)
	e.index[s] = i
	return i
}

// Add counts one record.
func (e *oldEvaluator) Add(r *record.Record) {
	group := ""
	if e.o.GroupBy != "" {
		var ok bool
		if group, ok = r.TaskFields[e.o.GroupBy]; !ok {
			group = NoGroup
		}
	}
	row := oldEvalRow{
		task: r.TaskIndex, rollout: r.RolloutIndex,
		src: e.intern(r.SourceFile), arm: e.intern(r.Arm), group: e.intern(group), failure: -1, term: e.intern(r.Termination),
		hasReward: r.HasReward, reward: r.Reward,
		rounds: r.Rounds, toolCalls: r.ToolCalls, toolErrors: r.ToolErrors,
		promptTokens: r.PromptTokens, completionTokens: r.CompletionTokens, latencyMs: r.LatencyMs,
	}
	if r.FailureClass != record.FailNone {
		row.failure = e.intern(string(r.FailureClass))
	}
	e.rows = append(e.rows, row)
}

// Evaluation computes the statistics of the records added so far.
func (e *oldEvaluator) Evaluation() *Evaluation {
	// Sort the rows so that sums, tasks and resamples come in one order whatever the
	// order the records came in.
	rows := slices.Clone(e.rows)
	name := func(i int32) string { return e.names[i] }
	slices.SortFunc(rows, func(a, b oldEvalRow) int {
		return cmp.Or(
			strings.Compare(name(a.src), name(b.src)),
			cmp.Compare(a.task, b.task),
			strings.Compare(name(a.arm), name(b.arm)),
			cmp.Compare(a.rollout, b.rollout),
		)
	})

	// k: powers of two up to the most scored rollouts of one task in one arm.
	maxN := 0
	for _, u := range e.units(rows) {
		maxN = max(maxN, u.n)
	}
	var ks []int
	for k := 1; k <= maxN; k *= 2 {
		ks = append(ks, k)
	}

	ev := &Evaluation{Options: e.o, K: ks, ByArm: []Scores{}}
	for i := 1; i < len(rows); i++ {
		a, b := &rows[i-1], &rows[i]
		if a.src == b.src && a.task == b.task && a.arm == b.arm && a.rollout == b.rollout {
			ev.Duplicates++
		}
	}
	ev.Overall = e.scores(rows, ks)
	ev.Overall.Scope = "all"

	byArm := oldPartition(rows, func(r *oldEvalRow) string { return name(r.arm) })
	for _, arm := range slices.Sorted(maps.Keys(byArm)) {
		s := e.scores(byArm[arm], ks)
		s.Scope, s.Arm = "arm="+arm, arm
		ev.ByArm = append(ev.ByArm, s)
	}
	if e.o.GroupBy == "" {
		return ev
	}
	byGroup := oldPartition(rows, func(r *oldEvalRow) string { return name(r.group) })
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		s := e.scores(byGroup[g], ks)
		s.Scope, s.Group = e.o.GroupBy+"="+g, g
		ev.ByGroup = append(ev.ByGroup, s)
	}
	if len(byArm) > 1 {
		for _, arm := range slices.Sorted(maps.Keys(byArm)) {
			groups := oldPartition(byArm[arm], func(r *oldEvalRow) string { return name(r.group) })
			for _, g := range slices.Sorted(maps.Keys(groups)) {
				s := e.scores(groups[g], ks)
				s.Scope, s.Arm, s.Group = "arm="+arm+" "+e.o.GroupBy+"="+g, arm, g
				ev.ByArmGroup = append(ev.ByArmGroup, s)
			}
		}
	}
	return ev
}

// oldPartition splits rows by key, keeping their order.
func oldPartition(rows []oldEvalRow, key func(*oldEvalRow) string) map[string][]oldEvalRow {
	m := map[string][]oldEvalRow{}
	for i := range rows {
		k := key(&rows[i])
		m[k] = append(m[k], rows[i])
	}
	return m
}

// scored reports whether a row is in the reward statistics, and with which reward.
func (e *oldEvaluator) scored(r *oldEvalRow) (reward float64, ok bool) {
	if r.failure >= 0 {
		return 0, e.o.ScoreFailuresAsZero
	}
	return r.reward, r.hasReward
}

// oldUnit is one task in one arm: n scored rollouts, c successes.
type oldUnit struct{ n, c int }

// units counts the scored rollouts and successes of each (source, task, arm) of sorted rows.
func (e *oldEvaluator) units(rows []oldEvalRow) []oldUnit {
	var out []oldUnit
	for i := range rows {
		r := &rows[i]
		if i == 0 || r.src != rows[i-1].src || r.task != rows[i-1].task || r.arm != rows[i-1].arm {
			out = append(out, oldUnit{})
		}
		reward, ok := e.scored(r)
		if !ok {
			continue
		}
		u := &out[len(out)-1]
		u.n++
		if reward >= e.o.Threshold {
			u.c++
		}
	}
	return slices.DeleteFunc(out, func(u oldUnit) bool { return u.n == 0 })
}

// taskArms counts the (source, task, arm) of sorted rows.
func taskArms(rows []oldEvalRow) int {
	n := 0
	for i := range rows {
		if i == 0 || rows[i].src != rows[i-1].src || rows[i].task != rows[i-1].task || rows[i].arm != rows[i-1].arm {
			n++
		}
	}
	return n
}

// scores computes the Scores of sorted rows.
func (e *oldEvaluator) scores(rows []oldEvalRow, ks []int) Scores {
	s := Scores{FailuresByClass: map[string]int{}, Terminations: map[string]int{}, PassAtK: []PassAtK{}}
	// Clusters for the bootstrap: the rewards of each (source, task), summed.
	var clusters []oldCluster
	var sum float64
	// Sums over the rollouts with a reward and no failure class.
	behaved := 0
	var rounds, toolCalls, prompt, completion int64
	var latency float64
	for i := range rows {
		r := &rows[i]
		s.Rollouts++
		if r.failure >= 0 {
			s.Failed++
			s.FailuresByClass[e.names[r.failure]]++
		}
		if t := e.names[r.term]; t != "" {
			s.Terminations[t]++
		}
		s.PromptTokens += r.promptTokens
		s.CompletionTokens += r.completionTokens
		s.ToolErrors += int64(r.toolErrors)
		if r.failure < 0 && r.hasReward {
			behaved++
			rounds += int64(r.rounds)
			toolCalls += int64(r.toolCalls)
			prompt += r.promptTokens
			completion += r.completionTokens
			latency += r.latencyMs
		}
		reward, ok := e.scored(r)
		if !ok {
			continue
		}
		s.Scored++
		if reward >= e.o.Threshold {
			s.Successes++
		}
		sum += reward
		if len(clusters) == 0 || !clusters[len(clusters)-1].same(r) {
			clusters = append(clusters, oldCluster{src: r.src, task: r.task})
		}
		c := &clusters[len(clusters)-1]
		c.sum += reward
		c.n++
	}
	if behaved > 0 {
		n := float64(behaved)
		s.MeanRounds, s.MeanToolCalls = float64(rounds)/n, float64(toolCalls)/n
		s.MeanPromptTokens, s.MeanCompletionTokens = float64(prompt)/n, float64(completion)/n
		s.MeanLatencyMs = latency / n
	}
	s.Tasks = len(clusters)
	if s.Scored > 0 {
		s.MeanReward = sum / float64(s.Scored)
	}
	s.StdErr = clusteredStdErr(toClusters(clusters), s.MeanReward)
	// Tasks whose every rollout failed.
	for i := 0; i < len(rows); {
		j, failed := i, true
		for ; j < len(rows) && rows[j].src == rows[i].src && rows[j].task == rows[i].task; j++ {
			failed = failed && rows[j].failure >= 0
		}
		if failed {
			s.TasksAllFailed++
			s.AllFailedTasks = append(s.AllFailedTasks, TaskRef{SourceFile: e.names[rows[i].src], TaskIndex: rows[i].task})
		}
		i = j
	}
	s.TaskArms = taskArms(rows)
	if s.Scored > 0 && e.o.Bootstrap > 0 {
		cl := toClusters(clusters)
		unit := true
		for i := range rows {
			if v, ok := e.scored(&rows[i]); ok {
				unit = unit && v >= 0 && v <= 1
			}
		}
		if unit && (s.MeanReward == 0 || s.MeanReward == 1) && s.StdErr == 0 {
			lo, hi := wilsonCI(cl, s.MeanReward)
			s.CI95 = &Interval{Low: lo, High: hi, Point: lo == hi, Method: "wilson"}
		} else {
			lo, hi := bootstrapCI(cl, e.o.Bootstrap, e.o.Seed)
			s.CI95 = &Interval{Low: lo, High: hi, Point: lo == hi, Method: CIBootstrap}
		}
	}

	units := e.units(rows)
	for _, k := range ks {
		p := PassAtK{K: k}
		for _, u := range units {
			if u.n < k {
				continue
			}
			p.Tasks++
			p.PassAt += PassAt(u.n, u.c, k)
			p.PassHat += PassHat(u.n, u.c, k)
		}
		if p.Tasks == 0 {
			continue
		}
		p.PassAt /= float64(p.Tasks)
		p.PassHat /= float64(p.Tasks)
		s.PassAtK = append(s.PassAtK, p)
	}
	return s
}

// oldCluster is one task's scored rollouts: their count and the sum of their rewards.
type oldCluster struct {
	src  int32
	task int64
	n    int
	sum  float64
}

func (c *oldCluster) same(r *oldEvalRow) bool { return c.src == r.src && c.task == r.task }

// bootstrapSeq is the base of the PCG streams of the bootstrap (any constant: the seed is

func toClusters(old []oldCluster) []cluster {
	out := make([]cluster, len(old))
	for i, c := range old {
		out[i] = cluster{n: c.n, sum: c.sum}
	}
	return out
}
