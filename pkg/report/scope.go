package report

import (
	"cmp"
	"math"
	"slices"
	"strings"
)

// Evaluation computes the statistics of the records added so far. It sorts the rows it
// keeps in place (their order does not matter), or merges its spilled runs (SpillTo), and
// goes over them twice, in one order whatever the order the records came in: by source,
// task, arm (their names' order) and rollout, then (for duplicates) by the rest, so that
// only identical rows tie. Every scope (the whole run, each arm, group and arm's group) is
// computed in those two passes, from a few numbers per scope and its cells' sums: the first
// pass counts, sums and gathers the clusters a bootstrap needs, the second, given the
// means, sums the clustered variance and pass@k. Its memory besides the rows does not grow
// with the records, past BootstrapMaxTasks clusters per scope.
func (e *Evaluator) Evaluation() *Evaluation {
	rank := make([]int32, len(e.names))
	byName := make([]int32, len(e.names))
	for i := range byName {
		byName[i] = int32(i)
	}
	slices.SortFunc(byName, func(a, b int32) int { return strings.Compare(e.names[a], e.names[b]) })
	for r, i := range byName {
		rank[i] = int32(r)
	}
	order := compareRows(func(a, b int32) int { return cmp.Compare(rank[a], rank[b]) })
	name := func(i int32) string { return e.names[i] }

	// The scopes, in the order of the Evaluation, and the scopes of each cell's rows.
	all := e.newScope(func(*evalCell) bool { return true })
	all.s.Scope = "all"
	scopes := []*scope{all}
	cellScopes := make([][]*scope, len(e.cells))
	for i := range e.cells {
		cellScopes[i] = []*scope{all}
	}
	add := func(keep func(*evalCell) bool) *scope {
		sc := e.newScope(keep)
		scopes = append(scopes, sc)
		for i := range e.cells {
			if keep(&e.cells[i]) {
				cellScopes[i] = append(cellScopes[i], sc)
			}
		}
		return sc
	}
	distinct := func(key func(*evalCell) int32, keep func(*evalCell) bool) []int32 {
		var out []int32
		for i := range e.cells {
			if c := &e.cells[i]; keep(c) && !slices.Contains(out, key(c)) {
				out = append(out, key(c))
			}
		}
		slices.SortFunc(out, func(a, b int32) int { return strings.Compare(name(a), name(b)) })
		return out
	}
	armOf := func(c *evalCell) int32 { return c.arm }
	groupOf := func(c *evalCell) int32 { return c.group }
	every := func(*evalCell) bool { return true }
	arms := distinct(armOf, every)
	var byArm, byGroup, byArmGroup []*scope
	for _, arm := range arms {
		sc := add(func(c *evalCell) bool { return c.arm == arm })
		sc.s.Scope, sc.s.Arm = "arm="+name(arm), name(arm)
		byArm = append(byArm, sc)
	}
	if e.o.GroupBy != "" {
		for _, g := range distinct(groupOf, every) {
			sc := add(func(c *evalCell) bool { return c.group == g })
			sc.s.Scope, sc.s.Group = e.o.GroupBy+"="+name(g), name(g)
			byGroup = append(byGroup, sc)
		}
		if len(arms) > 1 {
			for _, arm := range arms {
				for _, g := range distinct(groupOf, func(c *evalCell) bool { return c.arm == arm }) {
					sc := add(func(c *evalCell) bool { return c.arm == arm && c.group == g })
					sc.s.Scope, sc.s.Arm, sc.s.Group = "arm="+name(arm)+" "+e.o.GroupBy+"="+name(g), name(arm), name(g)
					byArmGroup = append(byArmGroup, sc)
				}
			}
		}
	}
	// The scopes of a row, by its cell; the cell of the last row is often the next one's.
	last := -1
	scopesOf := func(r *evalRow) []*scope {
		if last < 0 || e.cells[last].arm != r.arm || e.cells[last].group != r.group {
			last = int(e.cellOf[[2]int32{r.arm, r.group}])
		}
		return cellScopes[last]
	}

	ev := &Evaluation{Options: e.o, ByArm: []Scores{}}
	var prev evalRow
	first := true
	e.eachSorted(order, func(r *evalRow) {
		if !first && r.src == prev.src && r.task == prev.task && r.arm == prev.arm && r.rollout == prev.rollout {
			ev.Duplicates++
		}
		first, prev = false, *r
		for _, sc := range scopesOf(r) {
			e.firstPass(sc, r)
		}
	})
	// k: powers of two up to the most scored rollouts of one task in one arm.
	for _, sc := range scopes {
		e.endFirstPass(sc)
	}
	for k := 1; k <= all.maxN; k *= 2 {
		ev.K = append(ev.K, k)
	}
	for _, sc := range scopes {
		sc.pass = make([]PassAtK, len(ev.K))
		for i, k := range ev.K {
			sc.pass[i].K = k
		}
	}
	e.eachSorted(order, func(r *evalRow) {
		for _, sc := range scopesOf(r) {
			e.secondPass(sc, r, ev.K)
		}
	})
	for _, sc := range scopes {
		e.endSecondPass(sc, ev.K)
	}

	ev.Overall = all.s
	for _, sc := range byArm {
		ev.ByArm = append(ev.ByArm, sc.s)
	}
	for _, sc := range byGroup {
		ev.ByGroup = append(ev.ByGroup, sc.s)
	}
	for _, sc := range byArmGroup {
		ev.ByArmGroup = append(ev.ByArmGroup, sc.s)
	}
	return ev
}

// scope is the Scores of one scope while the sorted rows go by.
type scope struct {
	s     Scores
	scale float64 // the rewards are divided by it (scaleFor), so that sums do not overflow
	// The behaved rollouts' count and latency sum (the other behaviour sums are the cells').
	behaved int
	latency float64
	// The last row of the scope, and how many it had.
	prev evalRow
	rows int
	// The current task: its first row's source and index, whether every rollout so far
	// failed, and whether it has a cluster (a scored rollout).
	taskSrc   int32
	taskIdx   int64
	allFailed bool
	inCluster bool
	// The current unit (task and arm): its scored rollouts and successes.
	unitN, unitC int
	// First pass: the sum of the scaled rewards, whether they are all in [0, 1], their
	// range, the task and arm pairs, the most scored rollouts of a pair, the clusters (for
	// the bootstrap, while there are at most BootstrapMaxTasks), their number.
	sum         float64
	unit        bool
	least, most float64
	pairs       int
	maxN        int
	clusters    []cluster
	tasks       int
	// Second pass: the mean, the current cluster, the sums of the clustered standard error,
	// pass@k.
	mean float64
	cSum float64
	cN   int
	ss   float64
	ssN  int64
	pass []PassAtK
}

// newScope is a scope of the cells keep keeps, with their counts and sums.
func (e *Evaluator) newScope(keep func(*evalCell) bool) *scope {
	sc := &scope{s: Scores{FailuresByClass: map[string]int{}, Terminations: map[string]int{}, PassAtK: []PassAtK{}}, unit: true,
		least: math.Inf(1), most: math.Inf(-1)}
	s := &sc.s
	var most float64
	var rounds, toolCalls, prompt, completion int64
	for i := range e.cells {
		c := &e.cells[i]
		if !keep(c) {
			continue
		}
		s.Rollouts += c.rollouts
		s.Failed += c.failed
		for class, n := range c.failures {
			s.FailuresByClass[e.names[class]] += n
		}
		for term, n := range c.terminations {
			s.Terminations[e.names[term]] += n
		}
		s.PromptTokens += c.promptTokens
		s.CompletionTokens += c.completionTokens
		s.ToolErrors += c.toolErrors
		sc.behaved += c.behaved
		rounds += c.rounds
		toolCalls += c.toolCalls
		prompt += c.behavedPrompt
		completion += c.behavedCompletion
		most = max(most, c.most)
	}
	if sc.behaved > 0 {
		n := float64(sc.behaved)
		s.MeanRounds, s.MeanToolCalls = float64(rounds)/n, float64(toolCalls)/n
		s.MeanPromptTokens, s.MeanCompletionTokens = float64(prompt)/n, float64(completion)/n
	}
	sc.scale = scaleFor(most)
	return sc
}

// boundaries says whether r, the next row of sc, starts a new task, and a new unit (task and
// arm).
func (sc *scope) boundaries(r *evalRow) (task, unit bool) {
	p := &sc.prev
	task = sc.rows == 0 || r.src != p.src || r.task != p.task
	return task, task || r.arm != p.arm
}

func (e *Evaluator) firstPass(sc *scope, r *evalRow) {
	newTask, newUnit := sc.boundaries(r)
	if newTask {
		if sc.rows > 0 && sc.allFailed {
			e.allFailed(&sc.s, sc.taskSrc, sc.taskIdx)
		}
		sc.taskSrc, sc.taskIdx, sc.allFailed, sc.inCluster = r.src, r.task, true, false
	}
	if newUnit {
		sc.maxN = max(sc.maxN, sc.unitN)
		sc.unitN, sc.unitC = 0, 0
		sc.pairs++
	}
	sc.rows++
	sc.prev = *r
	if r.flags&rowFailed == 0 {
		sc.allFailed = false
	}
	if r.flags&(rowFailed|rowHasReward) == rowHasReward {
		sc.latency += r.latencyMs
	}
	reward, ok := e.scored(r)
	if !ok {
		return
	}
	sc.s.Scored++
	sc.unitN++
	sc.unit = sc.unit && reward >= 0 && reward <= 1
	if reward >= e.o.Threshold {
		sc.s.Successes++
	}
	reward /= sc.scale
	sc.sum += reward
	sc.least, sc.most = min(sc.least, reward), max(sc.most, reward)
	// Only the bootstrap needs the clusters; Wilson and t need their number and std err.
	bootstrap := e.o.CI == CIBootstrap && e.o.Bootstrap > 0
	if !sc.inCluster {
		sc.inCluster = true
		sc.tasks++
		if bootstrap && sc.tasks <= BootstrapMaxTasks {
			sc.clusters = append(sc.clusters, cluster{})
		} else {
			sc.clusters = nil // a normal interval: no bootstrap
		}
	}
	if bootstrap && sc.tasks <= BootstrapMaxTasks {
		c := &sc.clusters[len(sc.clusters)-1]
		c.sum += reward
		c.n++
	}
}

func (e *Evaluator) endFirstPass(sc *scope) {
	if sc.rows > 0 && sc.allFailed {
		e.allFailed(&sc.s, sc.taskSrc, sc.taskIdx)
	}
	sc.maxN = max(sc.maxN, sc.unitN)
	s := &sc.s
	if sc.behaved > 0 {
		s.MeanLatencyMs = sc.latency / float64(sc.behaved)
	}
	s.Tasks = sc.tasks
	s.TaskArms = sc.pairs
	if s.Scored > 0 {
		sc.mean = sc.sum / float64(s.Scored)
		s.MeanReward = sc.mean * sc.scale
	}
	sc.rows, sc.unitN, sc.unitC = 0, 0, 0
}

func (e *Evaluator) secondPass(sc *scope, r *evalRow, ks []int) {
	newTask, newUnit := sc.boundaries(r)
	if newTask {
		sc.endCluster()
	}
	if newUnit {
		e.endUnit(sc, ks)
	}
	sc.rows++
	sc.prev = *r
	reward, ok := e.scored(r)
	if !ok {
		return
	}
	sc.unitN++
	if reward >= e.o.Threshold {
		sc.unitC++
	}
	sc.cSum += reward / sc.scale
	sc.cN++
}

// endCluster adds the current task's cluster, if it has one, to the clustered variance.
func (sc *scope) endCluster() {
	if sc.cN > 0 {
		d := sc.cSum - sc.mean*float64(sc.cN)
		sc.ss += d * d
		sc.ssN += int64(sc.cN)
	}
	sc.cSum, sc.cN = 0, 0
}

// endUnit adds the current unit, if it has a scored rollout, to pass@k and pass^k of each k
// it has enough for.
func (e *Evaluator) endUnit(sc *scope, ks []int) {
	if sc.unitN > 0 {
		for i, k := range ks {
			least := k // the scored rollouts a task needs to count
			if e.o.PassKCommonTasks {
				least = ks[len(ks)-1]
			}
			if sc.unitN < least {
				continue
			}
			p := &sc.pass[i]
			p.Tasks++
			p.PassAt += PassAt(sc.unitN, sc.unitC, k)
			p.PassHat += PassHat(sc.unitN, sc.unitC, k)
		}
	}
	sc.unitN, sc.unitC = 0, 0
}

func (e *Evaluator) endSecondPass(sc *scope, ks []int) {
	sc.endCluster()
	e.endUnit(sc, ks)
	s := &sc.s
	if s.Scored > 0 {
		// clusteredStdErr over the clusters the pass went by.
		var se float64
		if g := sc.tasks; g >= 2 {
			se = math.Sqrt(float64(g)/float64(g-1)*sc.ss) / float64(sc.ssN)
		}
		s.StdErr = se * sc.scale
		if e.o.Bootstrap > 0 {
			s.CI95 = intervalOf(sc.tasks, se, sc.clusters, sc.mean, sc.least, sc.most, sc.unit, e.o)
			s.CI95.Low *= sc.scale
			s.CI95.High *= sc.scale
		}
	}
	for _, p := range sc.pass {
		if p.Tasks == 0 {
			continue
		}
		p.PassAt /= float64(p.Tasks)
		p.PassHat /= float64(p.Tasks)
		s.PassAtK = append(s.PassAtK, p)
	}
	sc.clusters, sc.pass = nil, nil
}

// allFailed counts in s the task (src, task), whose rollouts all failed.
func (e *Evaluator) allFailed(s *Scores, src int32, task int64) {
	s.TasksAllFailed++
	s.AllFailedTasks = append(s.AllFailedTasks, TaskRef{SourceFile: e.names[src], TaskIndex: task})
}

// scored reports whether a row is in the reward statistics, and with which reward.
func (e *Evaluator) scored(r *evalRow) (reward float64, ok bool) {
	if r.flags&rowFailed != 0 {
		return 0, e.o.ScoreFailuresAsZero
	}
	return r.reward, r.flags&rowHasReward != 0
}
