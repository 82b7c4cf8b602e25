package main

// Every figure rollout reports (summary.json, evaluation.json, rollout report --format json,
// rollout compare --format json) recomputed from rollouts.parquet alone: the file is read with
// parquet-go's generic reader (not pkg/report's), and the numbers are computed by direct loops
// over tasks written here, with other formula paths than pkg/report's (maps instead of sorted
// rows, exact binomials for pass@k, the clustered variance written with per-task means).

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// pqRow is the columns of rollouts.parquet the statistics use, by their names.
type pqRow struct {
	TaskIndex        int64   `parquet:"task_index"`
	RolloutIndex     int64   `parquet:"rollout_index"`
	TaskID           string  `parquet:"task_id"`
	TaskHash         string  `parquet:"task_hash"`
	Arm              string  `parquet:"arm"`
	Reward           float64 `parquet:"reward"`
	HasReward        bool    `parquet:"has_reward"`
	FailureClass     string  `parquet:"failure_class"`
	SourceFile       string  `parquet:"source_file"`
	Rounds           int32   `parquet:"rounds"`
	ToolCalls        int32   `parquet:"tool_calls"`
	ToolErrors       int32   `parquet:"tool_errors"`
	PromptTokens     int64   `parquet:"prompt_tokens"`
	CompletionTokens int64   `parquet:"completion_tokens"`
	LatencyMs        float64 `parquet:"latency_ms"`
}

func readPQ(t *testing.T, dir string) []pqRow {
	t.Helper()
	rows, err := parquet.ReadFile[pqRow](filepath.Join(dir, rundir.ParquetFile))
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// fractionalServer is a resource server whose verify gives rewards 0, 0.25, 0.5, 0.75 or 1
// (a hash of the verify body), whose seed_session always refuses the rows whose id is in
// refuse (every rollout of those tasks fails), and refuses every fifth call of the rows
// whose id is in flaky (some of their rollouts fail).
func fractionalServer(t *testing.T, refuse, flaky []string) string {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var row struct {
			ID string `json:"id"`
		}
		json.Unmarshal(body, &row)
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/seed_session":
			if slices.Contains(refuse, row.ID) || slices.Contains(flaky, row.ID) && calls.Add(1)%5 == 0 {
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `{"detail":"refused by the test server"}`)
				return
			}
			io.WriteString(w, `{}`)
		case "/verify":
			h := sha256.Sum256(body)
			fmt.Fprintf(w, `{"reward": %v}`, float64(binary.LittleEndian.Uint64(h[:8])%5)/4)
		default:
			io.WriteString(w, `{"result": "ok"}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// taskRows writes rows with ids t00…t{n-1} in the order given by perm (nil: in order);
// without their "id" field when noID.
func taskRows(t *testing.T, n int, perm []int, noID bool) string {
	if perm == nil {
		perm = make([]int, n)
		for i := range perm {
			perm[i] = i
		}
	}
	var b strings.Builder
	for _, i := range perm {
		id := fmt.Sprintf(`"id": "t%02d", `, i)
		if noID {
			id = ""
		}
		fmt.Fprintf(&b, `{%s"category": "c%d", "responses_create_params": {"input": [{"role": "user", "content": "task %d"}], `+
			`"tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}]}}`+"\n",
			id, i%3, i)
	}
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// scope is one scope's figures, recomputed.
type scope struct {
	rollouts, failed, scored, successes, tasks, allFailed, taskArms int
	mean, stdErr                                                    float64
	pass                                                            map[int][3]float64 // k → pass@k, pass^k, tasks
	promptTokens, completionTokens, toolErrors                      int64
	meanRounds, meanToolCalls, meanLatency                          float64
}

type recomputeOpts struct {
	zero, common bool
	threshold    float64
}

// recompute computes a scope's figures from the rows for which keep holds.
func recompute(rows []pqRow, keep func(*pqRow) bool, o recomputeOpts) scope {
	type taskKey struct {
		src  string
		task int64
	}
	type unitKey struct {
		taskKey
		arm string
	}
	var s scope
	taskSum, taskN := map[taskKey]float64{}, map[taskKey]int{}
	taskSeen, taskOK := map[taskKey]bool{}, map[taskKey]bool{}
	unitN, unitC := map[unitKey]int{}, map[unitKey]int{}
	var behaved int
	var rounds, calls int64
	var latency float64
	for i := range rows {
		r := &rows[i]
		if !keep(r) {
			continue
		}
		tk := taskKey{r.SourceFile, r.TaskIndex}
		uk := unitKey{tk, r.Arm}
		s.rollouts++
		s.promptTokens += r.PromptTokens
		s.completionTokens += r.CompletionTokens
		s.toolErrors += int64(r.ToolErrors)
		taskSeen[tk] = true
		if _, ok := unitN[uk]; !ok {
			unitN[uk] = 0
		}
		if r.FailureClass != "" {
			s.failed++
		} else {
			taskOK[tk] = true
		}
		if r.FailureClass == "" && r.HasReward {
			behaved++
			rounds += int64(r.Rounds)
			calls += int64(r.ToolCalls)
			latency += r.LatencyMs
		}
		var reward float64
		switch {
		case r.FailureClass == "" && r.HasReward:
			reward = r.Reward
		case r.FailureClass != "" && o.zero:
			reward = 0
		default:
			continue
		}
		s.scored++
		taskSum[tk] += reward
		taskN[tk]++
		unitN[uk]++
		if reward >= o.threshold {
			s.successes++
			unitC[uk]++
		}
	}
	for tk := range taskSeen {
		if !taskOK[tk] {
			s.allFailed++
		}
	}
	s.tasks = len(taskN)
	s.taskArms = len(unitN)
	if behaved > 0 {
		s.meanRounds, s.meanToolCalls, s.meanLatency = float64(rounds)/float64(behaved), float64(calls)/float64(behaved), latency/float64(behaved)
	}
	var total float64
	for _, v := range taskSum {
		total += v
	}
	if s.scored > 0 {
		s.mean = total / float64(s.scored)
	}
	// Clustered variance with per-task means: G/(G−1) · Σ_g n_g²·(m_g − m)² / N².
	if g := len(taskN); g > 1 {
		var ss float64
		for tk, n := range taskN {
			d := float64(n) * (taskSum[tk]/float64(n) - s.mean)
			ss += d * d
		}
		s.stdErr = math.Sqrt(float64(g)/float64(g-1)*ss) / float64(s.scored)
	}
	// pass@k with exact binomials.
	most := 0
	for _, n := range unitN {
		most = max(most, n)
	}
	var ks []int
	for k := 1; k <= most; k *= 2 {
		ks = append(ks, k)
	}
	s.pass = map[int][3]float64{}
	for _, k := range ks {
		need := k
		if o.common {
			need = ks[len(ks)-1]
		}
		var at, hat float64
		var tasks int
		for uk, n := range unitN {
			if n < need {
				continue
			}
			c := unitC[uk]
			tasks++
			nk := new(big.Int).Binomial(int64(n), int64(k))
			fail := new(big.Rat).SetFrac(new(big.Int).Binomial(int64(n-c), int64(k)), nk)
			all := new(big.Rat).SetFrac(new(big.Int).Binomial(int64(c), int64(k)), nk)
			f, _ := fail.Float64()
			a, _ := all.Float64()
			at += 1 - f
			hat += a
		}
		if tasks > 0 {
			s.pass[k] = [3]float64{at / float64(tasks), hat / float64(tasks), float64(tasks)}
		}
	}
	return s
}

// near reports whether a and b agree to rounding.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(a), math.Abs(b)) }

// checkScope compares a reported scope with its recomputation.
func checkScope(t *testing.T, what string, got report.Scores, want scope) {
	t.Helper()
	ints := []struct {
		name      string
		got, want int
	}{
		{"rollouts", got.Rollouts, want.rollouts}, {"failed", got.Failed, want.failed}, {"scored", got.Scored, want.scored},
		{"successes", got.Successes, want.successes}, {"tasks", got.Tasks, want.tasks},
		{"tasks_all_failed", got.TasksAllFailed, want.allFailed}, {"all_failed_tasks", len(got.AllFailedTasks), want.allFailed},
		{"task_arms", got.TaskArms, want.taskArms}, {"pass_at_k entries", len(got.PassAtK), len(want.pass)},
		{"prompt_tokens", int(got.PromptTokens), int(want.promptTokens)}, {"completion_tokens", int(got.CompletionTokens), int(want.completionTokens)},
		{"tool_errors", int(got.ToolErrors), int(want.toolErrors)},
	}
	for _, c := range ints {
		if c.got != c.want {
			t.Errorf("%s %s: %s %d, recomputed %d", what, got.Scope, c.name, c.got, c.want)
		}
	}
	floats := []struct {
		name      string
		got, want float64
	}{
		{"mean_reward", got.MeanReward, want.mean}, {"std_err", got.StdErr, want.stdErr},
		{"mean_rounds", got.MeanRounds, want.meanRounds}, {"mean_tool_calls", got.MeanToolCalls, want.meanToolCalls},
		{"mean_latency_ms", got.MeanLatencyMs, want.meanLatency},
	}
	for _, c := range floats {
		if !near(c.got, c.want) {
			t.Errorf("%s %s: %s %.17g, recomputed %.17g", what, got.Scope, c.name, c.got, c.want)
		}
	}
	for _, p := range got.PassAtK {
		w, ok := want.pass[p.K]
		if !ok || !near(p.PassAt, w[0]) || !near(p.PassHat, w[1]) || p.Tasks != int(w[2]) {
			t.Errorf("%s %s: pass@%d %v pass^%d %v over %d tasks; recomputed %v (present %v)", what, got.Scope, p.K, p.PassAt, p.K, p.PassHat, p.Tasks, w, ok)
		}
	}
	// The interval: around the mean, and within half a std err of an independent percentile
	// bootstrap (its own generator) of the task clusters.
	if got.CI95 == nil || got.CI95.Low > got.MeanReward+1e-12 || got.CI95.High < got.MeanReward-1e-12 {
		t.Errorf("%s %s: CI %+v around mean %v", what, got.Scope, got.CI95, got.MeanReward)
	}
}

// bootstrap is a percentile bootstrap of the mean of rows that keep holds, tasks resampled.
func bootstrap(rows []pqRow, keep func(*pqRow) bool, zero bool, seed uint64) (lo, hi float64) {
	type acc struct{ sum, n float64 }
	by := map[string]*acc{}
	for i := range rows {
		r := &rows[i]
		if !keep(r) {
			continue
		}
		var reward float64
		switch {
		case r.FailureClass == "" && r.HasReward:
			reward = r.Reward
		case r.FailureClass != "" && zero:
		default:
			continue
		}
		k := fmt.Sprint(r.SourceFile, "\x00", r.TaskIndex)
		if by[k] == nil {
			by[k] = &acc{}
		}
		by[k].sum += reward
		by[k].n++
	}
	var tasks []acc
	for _, a := range by {
		tasks = append(tasks, *a)
	}
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].sum/tasks[i].n < tasks[j].sum/tasks[j].n })
	rng := rand.New(rand.NewPCG(seed, 77))
	means := make([]float64, 4000)
	for i := range means {
		var s, n float64
		for range tasks {
			a := tasks[rng.IntN(len(tasks))]
			s += a.sum
			n += a.n
		}
		means[i] = s / n
	}
	sort.Float64s(means)
	return means[int(0.025*float64(len(means)-1))], means[int(0.975*float64(len(means)-1))]
}

func TestRecomputeFromParquet(t *testing.T) {
	const tasks, repeats = 24, 4
	// t03 and t17: every rollout refused; t05, t11: some.
	server := fractionalServer(t, []string{"t03", "t17"}, []string{"t05", "t11"})
	runArgs := func(input, out string) []string {
		return []string{"run", "--input", input, "--out", out, "--model-url", "builtin:sim", "--server", server,
			"--arms", "single,multi", "--num-repeats", fmt.Sprint(repeats), "--concurrency", "16",
			"--sim-http-500", "0.15", "--retries", "0", "--quiet", "--fail-on-error", "0.9"} // the failures are the point
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	inputA := taskRows(t, tasks, nil, false)
	inputB := taskRows(t, tasks, rand.New(rand.NewPCG(5, 6)).Perm(tasks), false) // the same tasks, shuffled
	for _, run := range [][2]string{{inputA, dirA}, {inputB, dirB}} {
		if r := runCLI(t, context.Background(), nil, runArgs(run[0], run[1])...); r.code != 0 {
			t.Fatalf("run: exit %d: %s", r.code, r.stderr)
		}
	}
	rows := readPQ(t, dirA)
	all := func(*pqRow) bool { return true }
	arm := func(name string) func(*pqRow) bool { return func(r *pqRow) bool { return r.Arm == name } }

	// The run has what the test is about.
	fractional, failed := false, 0
	for _, r := range rows {
		fractional = fractional || r.HasReward && r.Reward != 0 && r.Reward != 1
		if r.FailureClass != "" {
			failed++
		}
	}
	base := recompute(rows, all, recomputeOpts{threshold: 1})
	if len(rows) != tasks*repeats*2 || !fractional || failed == 0 || base.allFailed != 2 || base.pass[4][2] == float64(base.taskArms) {
		t.Fatalf("%d rows, fractional %v, %d failed, %d tasks all failed, pass@4 over %v of %d: not the run the test needs",
			len(rows), fractional, failed, base.allFailed, base.pass[4][2], base.taskArms)
	}

	// evaluation.json and summary.json, written by the run.
	var ev report.Evaluation
	readJSON(t, filepath.Join(dirA, "evaluation.json"), &ev)
	checkScope(t, "evaluation.json", ev.Overall, base)
	for _, s := range ev.ByArm {
		checkScope(t, "evaluation.json", s, recompute(rows, arm(s.Arm), recomputeOpts{threshold: 1}))
	}
	if len(ev.ByArm) != 2 {
		t.Errorf("evaluation.json: %d arms", len(ev.ByArm))
	}
	var sum report.Summary
	readJSON(t, filepath.Join(dirA, rundir.SummaryFile), &sum)
	if sum.Rollouts != base.rollouts || sum.Scored != base.scored || sum.Failed != base.failed || sum.Tasks != base.tasks ||
		sum.TasksAllFailed != base.allFailed || !near(sum.MeanReward, base.mean) || !near(sum.StdErr, base.stdErr) ||
		sum.CI95 == nil || *sum.CI95 != *ev.Overall.CI95 {
		t.Errorf("summary.json %+v (CI %+v); recomputed %+v, evaluation CI %+v", sum, sum.CI95, base, ev.Overall.CI95)
	}
	lo, hi := bootstrap(rows, all, false, 1)
	if ci := ev.Overall.CI95; math.Abs(ci.Low-lo) > base.stdErr/2 || math.Abs(ci.High-hi) > base.stdErr/2 {
		t.Errorf("CI %v to %v; an independent bootstrap: %v to %v (std err %v)", ci.Low, ci.High, lo, hi, base.stdErr)
	}

	// rollout report, with each of the scoring options, grouped by category.
	for _, c := range []struct {
		flags []string
		o     recomputeOpts
	}{
		{nil, recomputeOpts{threshold: 1}},
		{[]string{"--score-failures-as-zero"}, recomputeOpts{zero: true, threshold: 1}},
		{[]string{"--pass-k-common-tasks"}, recomputeOpts{common: true, threshold: 1}},
		{[]string{"--threshold", "0.5", "--score-failures-as-zero", "--pass-k-common-tasks"}, recomputeOpts{zero: true, common: true, threshold: 0.5}},
		{[]string{"--threshold", "0"}, recomputeOpts{threshold: 0}},
	} {
		r := runCLI(t, context.Background(), nil, append([]string{"report", dirA, "--format", "json", "--group-by", "category"}, c.flags...)...)
		if r.code != 0 {
			t.Fatalf("report %v: exit %d: %s", c.flags, r.code, r.stderr)
		}
		var got report.Evaluation
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("report %v", c.flags)
		checkScope(t, what, got.Overall, recompute(rows, all, c.o))
		for _, s := range got.ByGroup {
			g := s.Group
			checkScope(t, what, s, recompute(rows, func(r *pqRow) bool { return fmt.Sprintf("c%d", idNum(r.TaskID)%3) == g }, c.o))
		}
		for _, s := range got.ByArmGroup {
			a, g := s.Arm, s.Group
			checkScope(t, what, s, recompute(rows, func(r *pqRow) bool { return r.Arm == a && fmt.Sprintf("c%d", idNum(r.TaskID)%3) == g }, c.o))
		}
		if len(got.ByGroup) != 3 || len(got.ByArmGroup) != 6 {
			t.Errorf("%s: %d groups, %d arm groups", what, len(got.ByGroup), len(got.ByArmGroup))
		}
	}

	// rollout compare: the two arms of run A, and run B (shuffled task order) against run A.
	compare := func(args ...string) report.Comparison {
		t.Helper()
		r := runCLI(t, context.Background(), nil, append(append([]string{"compare"}, args...), "--format", "json")...)
		if r.code != 0 {
			t.Fatalf("compare %v: exit %d: %s", args, r.code, r.stderr)
		}
		var c report.Comparison
		if err := json.Unmarshal([]byte(r.stdout), &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	byID := func(r *pqRow) string { return "id:" + r.TaskID }
	checkComparison(t, "arms", "task id", compare(dirA, "--arms", "single,multi"), rows, rows, arm("single"), arm("multi"), byID)
	rowsB := readPQ(t, dirB)
	checkComparison(t, "runs", "task id", compare(dirA, dirB, "--arm", "multi"), rows, rowsB, arm("multi"), arm("multi"), byID)

	// Rows without ids, in two orders: paired by their content's hash.
	dirC, dirD := t.TempDir(), t.TempDir()
	perm := rand.New(rand.NewPCG(7, 8)).Perm(tasks)
	for _, run := range [][2]string{{taskRows(t, tasks, nil, true), dirC}, {taskRows(t, tasks, perm, true), dirD}} {
		if r := runCLI(t, context.Background(), nil, runArgs(run[0], run[1])...); r.code != 0 {
			t.Fatalf("run: exit %d: %s", r.code, r.stderr)
		}
	}
	rowsC, rowsD := readPQ(t, dirC), readPQ(t, dirD)
	if rowsC[0].TaskID != "" || len(rowsC[0].TaskHash) != 16 {
		t.Fatalf("a row without id: task_id %q, task_hash %q", rowsC[0].TaskID, rowsC[0].TaskHash)
	}
	byHash := func(r *pqRow) string { return "row:" + r.TaskHash }
	checkComparison(t, "runs without ids", "task id or row hash", compare(dirC, dirD, "--arm", "multi"), rowsC, rowsD, arm("multi"), arm("multi"), byHash)
}

// idNum is the number of a test row's id ("t07": 7).
func idNum(id string) int {
	var n int
	fmt.Sscanf(id, "t%d", &n)
	return n
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// checkComparison recomputes a comparison of side a (the rows of ra that keepA holds) and b:
// pairs by (task key, repeat), their differences, clustered by task key.
func checkComparison(t *testing.T, what, pairedBy string, c report.Comparison, ra, rb []pqRow, keepA, keepB func(*pqRow) bool, taskKey func(*pqRow) string) {
	t.Helper()
	type key struct {
		id string
		k  int64
	}
	side := func(rows []pqRow, keep func(*pqRow) bool) (map[key]float64, map[string]bool) {
		scored, seen := map[key]float64{}, map[string]bool{}
		for i := range rows {
			r := &rows[i]
			if !keep(r) {
				continue
			}
			seen[taskKey(r)] = true
			if r.FailureClass == "" && r.HasReward {
				scored[key{taskKey(r), r.RolloutIndex}] = r.Reward
			}
		}
		return scored, seen
	}
	sa, seenA := side(ra, keepA)
	sb, seenB := side(rb, keepB)
	diff, n, sumA, sumB := map[string]float64{}, map[string]int{}, 0.0, 0.0
	pairs := 0
	for k, va := range sa {
		if vb, ok := sb[k]; ok {
			diff[k.id] += vb - va
			n[k.id]++
			sumA += va
			sumB += vb
			pairs++
		}
	}
	var total float64
	won, lost, tied := 0, 0, 0
	for id, d := range diff {
		total += d
		switch m := d / float64(n[id]); {
		case m > 1e-9:
			won++
		case m < -1e-9:
			lost++
		default:
			tied++
		}
	}
	mean := total / float64(pairs)
	var ss float64
	for id, d := range diff {
		x := float64(n[id]) * (d/float64(n[id]) - mean)
		ss += x * x
	}
	g := float64(len(diff))
	se := math.Sqrt(g/(g-1)*ss) / float64(pairs)
	var noPairs []string
	for id := range seenA {
		if seenB[id] && n[id] == 0 {
			noPairs = append(noPairs, id)
		}
	}
	sort.Strings(noPairs)
	if c.PairedBy != pairedBy || c.Pairs != pairs || c.Tasks != len(diff) || !near(c.MeanDiff, mean) || !near(c.StdErr, se) ||
		!near(c.PairedMeans[0], sumA/float64(pairs)) || !near(c.PairedMeans[1], sumB/float64(pairs)) ||
		c.Won != won || c.Lost != lost || c.Tied != tied || !slices.Equal(c.NoPairs, noPairs) || len(c.OnlyA)+len(c.OnlyB) != 0 {
		t.Errorf("%s: compare %+v;\nrecomputed: by task id, %d pairs in %d tasks, mean %v std err %v, paired means %v %v, won %d lost %d tied %d, without pairs %v",
			what, c, pairs, len(diff), mean, se, sumA/float64(pairs), sumB/float64(pairs), won, lost, tied, noPairs)
	}
	if pairedBy == "task id" && len(noPairs) < 2 {
		t.Errorf("%s: %d tasks without pairs: the all-failed tasks must be among them", what, len(noPairs))
	}
	if c.CI95 == nil || c.CI95.Low > c.MeanDiff || c.CI95.High < c.MeanDiff {
		t.Errorf("%s: CI %+v around %v", what, c.CI95, c.MeanDiff)
	}
}
