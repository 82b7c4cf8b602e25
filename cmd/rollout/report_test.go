package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// reportRun runs 12 extraction tasks (4 of each difficulty) × 4 repeats against the simulator,
// with wrong arguments in 30% of rounds so that rewards vary, and returns the output directory.
func reportRun(t *testing.T) string {
	t.Helper()
	input := headLines(t, extractionData, 12)
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--model-url", "builtin:sim",
		"--server", "builtin:extraction", "--num-repeats", "4", "--sim-wrong-argument", "0.3", "--concurrency", "8", "--quiet")
	if r.code != 0 {
		t.Fatalf("run: exit %d\nstderr: %s", r.code, r.stderr)
	}
	return dir
}

// choose is C(n, k) by integers: the test's own binomial, apart from report's.
func choose(n, k int) float64 {
	if k < 0 || k > n {
		return 0
	}
	c := int64(1)
	for i := 1; i <= k; i++ {
		c = c * int64(n-k+i) / int64(i)
	}
	return float64(c)
}

// expectScores computes, from records, what report gives for them: counts, mean reward and
// pass@k, pass^k over tasks (one arm), failures left out.
func expectScores(recs []record.Record, ks []int) (rollouts, failed, scored, tasks int, mean float64, pass, passHat map[int]float64) {
	type nc struct{ n, c int }
	per := map[int64]*nc{}
	var sum float64
	for _, r := range recs {
		rollouts++
		if r.FailureClass != "" {
			failed++
			continue
		}
		if !r.HasReward {
			continue
		}
		scored++
		sum += r.Reward
		if per[r.TaskIndex] == nil {
			per[r.TaskIndex] = &nc{}
		}
		per[r.TaskIndex].n++
		if r.Reward >= 1 {
			per[r.TaskIndex].c++
		}
	}
	mean = sum / float64(scored)
	pass, passHat = map[int]float64{}, map[int]float64{}
	for _, k := range ks {
		m := 0
		for _, t := range per {
			if t.n < k {
				continue
			}
			m++
			pass[k] += 1 - choose(t.n-t.c, k)/choose(t.n, k)
			passHat[k] += choose(t.c, k) / choose(t.n, k)
		}
		pass[k] /= float64(m)
		passHat[k] /= float64(m)
	}
	return rollouts, failed, scored, len(per), mean, pass, passHat
}

// rollout report DIR --group-by difficulty --format json gives, per group, the numbers the
// records give when counted here; the same from the Parquet file and from the journal; the
// same bytes twice (the bootstrap is seeded).
func TestReportGroupsMatchRecords(t *testing.T) {
	dir := reportRun(t)
	recs := readRecords(t, dir)
	if len(recs) != 48 {
		t.Fatalf("%d records, want 48", len(recs))
	}
	ones := 0
	for _, r := range recs {
		if r.Reward >= 1 {
			ones++
		}
	}
	if ones == 0 || ones == len(recs) {
		t.Fatalf("%d of %d rollouts scored 1: the fixture needs both", ones, len(recs))
	}

	r := runCLI(t, context.Background(), nil, "report", dir, "--group-by", "difficulty", "--format", "json")
	if r.code != 0 {
		t.Fatalf("report: exit %d\nstderr: %s", r.code, r.stderr)
	}
	var ev report.Evaluation
	if err := json.Unmarshal([]byte(r.stdout), &ev); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if !slices.Equal(ev.K, []int{1, 2, 4}) {
		t.Errorf("k %v, want 1 2 4", ev.K)
	}
	groups := map[string][]record.Record{}
	for _, rec := range recs {
		groups[rec.TaskFields["difficulty"]] = append(groups[rec.TaskFields["difficulty"]], rec)
	}
	if len(groups) != 3 || len(ev.ByGroup) != 3 {
		t.Fatalf("groups %d in the records, %d in the report", len(groups), len(ev.ByGroup))
	}
	check := func(s report.Scores, recs []record.Record) {
		t.Helper()
		rollouts, failed, scored, tasks, mean, pass, passHat := expectScores(recs, ev.K)
		if s.Rollouts != rollouts || s.Failed != failed || s.Scored != scored || s.Tasks != tasks || math.Abs(s.MeanReward-mean) > 1e-12 {
			t.Errorf("%s: rollouts %d failed %d scored %d tasks %d mean %v; the records give %d %d %d %d %v",
				s.Scope, s.Rollouts, s.Failed, s.Scored, s.Tasks, s.MeanReward, rollouts, failed, scored, tasks, mean)
		}
		if s.CI95 == nil || s.CI95.Low > s.MeanReward || s.CI95.High < s.MeanReward {
			t.Errorf("%s: mean %v, CI %+v", s.Scope, s.MeanReward, s.CI95)
		}
		for _, k := range ev.K {
			p, ok := s.Pass(k)
			if !ok || math.Abs(p.PassAt-pass[k]) > 1e-12 || math.Abs(p.PassHat-passHat[k]) > 1e-12 {
				t.Errorf("%s: pass@%d %+v; the records give pass@%d %v, pass^%d %v", s.Scope, k, p, k, pass[k], k, passHat[k])
			}
		}
	}
	check(ev.Overall, recs)
	for _, s := range ev.ByGroup {
		if s.Group != strings.TrimPrefix(s.Scope, "difficulty=") || groups[s.Group] == nil {
			t.Errorf("group %q (scope %q) not in the records", s.Group, s.Scope)
			continue
		}
		check(s, groups[s.Group])
	}

	// The same from the Parquet file and from the journal; the same bytes again.
	for _, src := range []string{dir, filepath.Join(dir, rundir.ParquetFile), filepath.Join(dir, rundir.JournalFile)} {
		again := runCLI(t, context.Background(), nil, "report", "--format", "json", src, "--group-by", "difficulty")
		if again.code != 0 || again.stdout != r.stdout {
			t.Errorf("report %s: exit %d, output differs: %s\n%s", src, again.code, again.stderr, again.stdout)
		}
	}
	// A run directory without its Parquet file (a run not finished) is read from its journal.
	alive := t.TempDir()
	if err := os.WriteFile(filepath.Join(alive, rundir.JournalFile), []byte(readFile(t, filepath.Join(dir, rundir.JournalFile))), 0o644); err != nil {
		t.Fatal(err)
	}
	fromJournal := runCLI(t, context.Background(), nil, "report", alive, "--group-by", "difficulty", "--format", "json")
	if fromJournal.code != 0 || fromJournal.stdout != r.stdout || !strings.Contains(fromJournal.stderr, "reading "+filepath.Join(alive, rundir.JournalFile)) {
		t.Errorf("report of a directory with only a journal: exit %d, stderr %s", fromJournal.code, fromJournal.stderr)
	}
	// The same run twice: counted twice, with a warning.
	twice := runCLI(t, context.Background(), nil, "report", dir, dir, "--format", "json", "--pool")
	var ev3 report.Evaluation
	if err := json.Unmarshal([]byte(twice.stdout), &ev3); err != nil || ev3.Duplicates != 48 || ev3.Overall.Rollouts != 96 || !strings.Contains(twice.stderr, "48 records repeat") {
		t.Errorf("the same run twice: %v, %d duplicates, stderr %s", err, ev3.Duplicates, twice.stderr)
	}
	if ev.Duplicates != 0 {
		t.Errorf("one run: %d duplicates", ev.Duplicates)
	}
	// Another seed moves the interval, not the point estimates.
	other := runCLI(t, context.Background(), nil, "report", dir, "--group-by", "difficulty", "--format", "json", "--seed", "99")
	// --bootstrap-seed is its name; --seed, its old one, still works.
	if renamed := runCLI(t, context.Background(), nil, "report", dir, "--group-by", "difficulty", "--format", "json", "--bootstrap-seed", "99"); renamed.stdout != other.stdout || renamed.code != 0 {
		t.Errorf("--bootstrap-seed 99 and --seed 99 differ: exit %d: %s", renamed.code, renamed.stderr)
	}
	var ev2 report.Evaluation
	if err := json.Unmarshal([]byte(other.stdout), &ev2); err != nil || ev2.Overall.MeanReward != ev.Overall.MeanReward || ev2.Options.Seed != 99 {
		t.Errorf("--seed 99: %v %+v", err, ev2.Overall)
	}
}

// Two runs are evaluated together (--pool); failures scored as zero change the numbers; the text and
// Markdown formats have their tables.
func TestReportFormatsAndOptions(t *testing.T) {
	dir := reportRun(t)
	recs := readRecords(t, dir)

	// A failed rollout added through a journal: left out, or scored as 0.
	fail := recs[0]
	fail.RolloutIndex, fail.FailureClass, fail.Reward, fail.HasReward, fail.Error = 4, record.FailRateLimited, 0, false, "429"
	b, err := json.Marshal(fail)
	if err != nil {
		t.Fatal(err)
	}
	journal := filepath.Join(t.TempDir(), "extra.jsonl")
	if err := os.WriteFile(journal, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	eval := func(args ...string) report.Evaluation {
		t.Helper()
		r := runCLI(t, context.Background(), nil, append([]string{"report", "--format", "json", "--pool"}, args...)...)
		if r.code != 0 {
			t.Fatalf("report %v: exit %d\n%s", args, r.code, r.stderr)
		}
		var ev report.Evaluation
		if err := json.Unmarshal([]byte(r.stdout), &ev); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	base := eval(dir)
	left := eval(dir, journal)
	zero := eval(dir, journal, "--score-failures-as-zero")
	if left.Overall.Rollouts != 49 || left.Overall.Failed != 1 || left.Overall.Scored != 48 || left.Overall.MeanReward != base.Overall.MeanReward {
		t.Errorf("failure left out: %+v", left.Overall)
	}
	wantZero := base.Overall.MeanReward * 48 / 49
	if zero.Overall.Scored != 49 || math.Abs(zero.Overall.MeanReward-wantZero) > 1e-12 {
		t.Errorf("failure as zero: scored %d mean %v, want 49 and %v", zero.Overall.Scored, zero.Overall.MeanReward, wantZero)
	}
	if p, _ := zero.Overall.Pass(1); zero.Options.ScoreFailuresAsZero != true || p.Tasks != 12 {
		t.Errorf("failure as zero: options %+v pass@1 %+v", zero.Options, p)
	}
	// A lower threshold: more successes.
	if low := eval(dir, "--threshold", "0.5"); low.Overall.Successes < base.Overall.Successes || low.Options.Threshold != 0.5 {
		t.Errorf("--threshold 0.5: %d successes, %d at 1", low.Overall.Successes, base.Overall.Successes)
	}
	// Threshold 0: every scored rollout (rewards are 0 or more) succeeds.
	if all := eval(dir, "--threshold", "0"); all.Overall.Successes != all.Overall.Scored || all.Options.Threshold != 0 {
		t.Errorf("--threshold 0: %d successes of %d scored, threshold %v", all.Overall.Successes, all.Overall.Scored, all.Options.Threshold)
	}
	if none := eval(dir, "--bootstrap", "0"); none.Overall.CI95 != nil {
		t.Errorf("--bootstrap 0: CI %+v", none.Overall.CI95)
	}

	md := runCLI(t, context.Background(), nil, "report", dir, "--format", "markdown", "--group-by", "category")
	if md.code != 0 || !strings.Contains(md.stdout, "| scope | rollouts | failed | scored | tasks | mean reward |") ||
		!strings.Contains(md.stdout, "| --- | ---: |") || !strings.Contains(md.stdout, "| category=lookup |") {
		t.Errorf("markdown: exit %d\n%s%s", md.code, md.stdout, md.stderr)
	}
	text := runCLI(t, context.Background(), nil, "report", dir)
	if text.code != 0 || !strings.Contains(text.stdout, "pass@4") || !strings.Contains(text.stdout, "95% CI: Wilson score over tasks") || strings.Contains(text.stdout, "bootstrap") {
		t.Errorf("text: exit %d\n%s%s", text.code, text.stdout, text.stderr)
	}
	if boot := eval(dir, "--ci", "bootstrap", "--bootstrap-seed", "3"); boot.Options.CI != "bootstrap" || boot.Overall.CI95 == nil || boot.Overall.CI95.Method != "bootstrap" ||
		*boot.Overall.CI95 == *base.Overall.CI95 || base.Overall.CI95.Method != "wilson" {
		t.Errorf("--ci bootstrap: options %+v, CI %+v (default %+v)", boot.Options, boot.Overall.CI95, base.Overall.CI95)
	}
	text = runCLI(t, context.Background(), nil, "report", dir, "--ci", "bootstrap")
	if text.code != 0 || !strings.Contains(text.stdout, "95% CI: bootstrap over tasks, 2000 resamples, seed 0") {
		t.Errorf("text, --ci bootstrap: exit %d\n%s%s", text.code, text.stdout, text.stderr)
	}
	if bad := runCLI(t, context.Background(), nil, "report", dir, "--ci", "bca"); bad.code != 2 || !strings.Contains(bad.stderr, `--ci "bca": want auto or bootstrap`) {
		t.Errorf("--ci bca: exit %d\n%s", bad.code, bad.stderr)
	}
}

// Bad flags and files exit 2, and the error names the file.
func TestReportUsageErrors(t *testing.T) {
	tmp := t.TempDir()
	missing := filepath.Join(tmp, "nope", "rollouts.parquet")
	garbage := filepath.Join(tmp, "garbage.parquet")
	if err := os.WriteFile(garbage, []byte("not parquet at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	tasks := headLines(t, extractionData, 2) // a task file is not a journal
	empty := t.TempDir()
	other := filepath.Join(tmp, "notes.txt")
	if err := os.WriteFile(other, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{missing}, missing},
		{[]string{garbage}, garbage},
		{[]string{tasks}, tasks + ":1: not a rollout record"},
		{[]string{empty}, empty + ": no rollouts.parquet or journal.jsonl"},
		{[]string{other}, other + ": not a .parquet file"},
		{nil, "which run directory"},
		{[]string{empty, "--format", "yaml"}, `--format "yaml"`},
		{[]string{empty, "--threshold", "Inf"}, "--threshold"},
		{[]string{empty, "--threshold", "NaN"}, "--threshold"},
		{[]string{empty, "--bootstrap", "-3"}, "--bootstrap"},
		{[]string{empty, "--seed", "-1"}, "seed"},
		{[]string{empty, "--no-such-flag"}, "no-such-flag"},
	} {
		r := runCLI(t, context.Background(), nil, append([]string{"report"}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("report %v: exit %d, stderr %q; want exit %d naming %q", c.args, r.code, r.stderr, exitUsage, c.want)
		}
	}
	if r := runCLI(t, context.Background(), nil, "report", "-h"); r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: rollout report") || r.stderr != "" { // help goes to stdout
		t.Errorf("-h: exit %d, %s", r.code, r.stderr)
	}
}
