package report

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// summaryFixture: four scored rollouts with rewards 1, 0, 1, 1 and three
// failures, which must not count towards the means; one task each.
func summaryFixture() []record.Record {
	return []record.Record{
		{TaskIndex: 0, Reward: 1, HasReward: true, Rounds: 2, ToolCalls: 3, ToolErrors: 0, PromptTokens: 100, CompletionTokens: 10, LatencyMs: 1000, Termination: "done"},
		{TaskIndex: 1, Reward: 0, HasReward: true, Rounds: 4, ToolCalls: 5, ToolErrors: 2, PromptTokens: 200, CompletionTokens: 20, LatencyMs: 3000, Termination: "max_rounds"},
		{TaskIndex: 2, Reward: 1, HasReward: true, Rounds: 1, ToolCalls: 0, ToolErrors: 0, PromptTokens: 50, CompletionTokens: 5, LatencyMs: 500, Termination: "done"},
		{TaskIndex: 3, Reward: 1, HasReward: true, Rounds: 3, ToolCalls: 4, ToolErrors: 1, PromptTokens: 150, CompletionTokens: 15, LatencyMs: 1500, Termination: "done"},
		{TaskIndex: 4, FailureClass: record.FailRateLimited, Rounds: 9, ToolCalls: 9, ToolErrors: 1, PromptTokens: 1000, CompletionTokens: 0, LatencyMs: 60000, Error: "429"},
		{TaskIndex: 5, FailureClass: record.FailTimeout, Rounds: 7, ToolCalls: 2, PromptTokens: 500, CompletionTokens: 50, LatencyMs: 90000, Termination: "timeout"},
		// Inconsistent on purpose: a failure class wins over HasReward.
		{TaskIndex: 6, FailureClass: record.FailRateLimited, Reward: 1, HasReward: true, Rounds: 1},
	}
}

func TestStats(t *testing.T) {
	const eps = 1e-12
	tests := []struct {
		name string
		recs []record.Record
		want Summary
	}{
		{
			name: "zero value",
			want: Summary{FailuresByClass: map[string]int{}, Terminations: map[string]int{}},
		},
		{
			name: "one scored",
			recs: []record.Record{{Reward: 0.5, HasReward: true, Rounds: 3, ToolCalls: 2, LatencyMs: 10, Termination: "done"}},
			want: Summary{
				Rollouts: 1, Scored: 1,
				FailuresByClass: map[string]int{}, Terminations: map[string]int{"done": 1},
				MeanReward: 0.5, StdErr: 0, MeanRounds: 3, MeanToolCalls: 2, MeanLatencyMs: 10,
			},
		},
		{
			name: "only failures",
			recs: []record.Record{{FailureClass: record.FailBadTask}, {FailureClass: record.FailBadTask, PromptTokens: 5}},
			want: Summary{
				Rollouts: 2, Failed: 2,
				FailuresByClass: map[string]int{record.FailBadTask: 2}, Terminations: map[string]int{},
				PromptTokens: 5,
			},
		},
		{
			// Each class's most common error text, ties to the first in byte order; records
			// without an error text are not counted.
			name: "failure messages",
			recs: []record.Record{
				{FailureClass: record.FailModelUnavailable, Error: "refused"},
				{FailureClass: record.FailModelUnavailable, Error: "reset"},
				{FailureClass: record.FailModelUnavailable, Error: "refused"},
				{FailureClass: record.FailModelUnavailable},
				{FailureClass: record.FailVerify, Error: "b"},
				{FailureClass: record.FailVerify, Error: "a"},
			},
			want: Summary{
				Rollouts: 6, Failed: 6,
				FailuresByClass: map[string]int{record.FailModelUnavailable: 4, record.FailVerify: 2}, Terminations: map[string]int{},
				FailureMessages: map[string]FailureMessage{record.FailModelUnavailable: {"refused", 2}, record.FailVerify: {"a", 1}},
			},
		},
		{
			name: "fixture",
			recs: summaryFixture(),
			// Scored rewards 1,0,1,1: mean .75. Stats has no std err: it
			// needs the tasks (SetScores).
			want: Summary{
				Rollouts: 7, Scored: 4, Failed: 3,
				FailuresByClass: map[string]int{record.FailRateLimited: 2, record.FailTimeout: 1},
				Terminations:    map[string]int{"done": 3, "max_rounds": 1, "timeout": 1},
				FailureMessages: map[string]FailureMessage{record.FailRateLimited: {"429", 1}}, // the other failures have no error text
				MeanReward:      0.75,
				MeanRounds:      2.5, MeanToolCalls: 3, MeanLatencyMs: 1500,
				PromptTokens: 2000, CompletionTokens: 100, ToolErrors: 4,
			},
		},
		{
			name: "constant rewards",
			recs: []record.Record{{Reward: 0.3, HasReward: true}, {Reward: 0.3, HasReward: true}, {Reward: 0.3, HasReward: true}},
			want: Summary{
				Rollouts: 3, Scored: 3,
				FailuresByClass: map[string]int{}, Terminations: map[string]int{},
				MeanReward: 0.3, StdErr: 0,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Stats
			for i := range tt.recs {
				s.Add(&tt.recs[i])
			}
			got := s.Summary()
			floats := []struct {
				name      string
				got, want float64
			}{
				{"MeanReward", got.MeanReward, tt.want.MeanReward},
				{"StdErr", got.StdErr, tt.want.StdErr},
				{"MeanRounds", got.MeanRounds, tt.want.MeanRounds},
				{"MeanToolCalls", got.MeanToolCalls, tt.want.MeanToolCalls},
				{"MeanLatencyMs", got.MeanLatencyMs, tt.want.MeanLatencyMs},
			}
			for _, f := range floats {
				if math.Abs(f.got-f.want) > eps {
					t.Errorf("%s: got %v, want %v", f.name, f.got, f.want)
				}
			}
			got.MeanReward, got.StdErr, got.MeanRounds, got.MeanToolCalls, got.MeanLatencyMs = 0, 0, 0, 0, 0
			want := tt.want
			want.MeanReward, want.StdErr, want.MeanRounds, want.MeanToolCalls, want.MeanLatencyMs = 0, 0, 0, 0, 0
			if !reflect.DeepEqual(got, want) {
				t.Errorf("summary:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// With one rollout per task the task-clustered std err is the plain one, sqrt(Σ(x−mean)²/(N−1))
// /sqrt(N): checked where a naive sum of squares would lose every digit. The running mean of
// Stats agrees, and SetScores carries the Evaluation's numbers into the Summary.
func TestClusteredStdErrOneRolloutPerTask(t *testing.T) {
	var s Stats
	var xs []float64
	var recs []record.Record
	for i := range 1000 {
		x := 1e9 + float64(i%10)/10
		xs = append(xs, x)
		recs = append(recs, record.Record{TaskIndex: int64(i), Reward: x, HasReward: true})
		s.Add(&recs[i])
	}
	var mean float64
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	wantSE := math.Sqrt(ss/float64(len(xs)-1)) / math.Sqrt(float64(len(xs)))
	if got := s.Summary(); math.Abs(got.MeanReward-mean) > 1e-6 || got.StdErr != 0 || got.CI95 != nil {
		t.Errorf("Stats: mean %v se %v CI %v, want mean %v and no se or CI", got.MeanReward, got.StdErr, got.CI95, mean)
	}
	ev := Evaluate(recs, StatsOptions{Bootstrap: 200})
	got := s.Summary()
	got.SetScores(&ev.Overall)
	if math.Abs(got.MeanReward-mean) > 1e-6 || math.Abs(got.StdErr-wantSE)/wantSE > 1e-6 || got.Tasks != 1000 {
		t.Errorf("got mean %v se %v tasks %d, want mean %v se %v tasks 1000", got.MeanReward, got.StdErr, got.Tasks, mean, wantSE)
	}
	if got.CI95 == nil || *got.CI95 != *ev.Overall.CI95 || got.CI95 == ev.Overall.CI95 {
		t.Errorf("CI %v, want a copy of %v", got.CI95, ev.Overall.CI95)
	}
}

func TestSummaryIsASnapshot(t *testing.T) {
	var s Stats
	s.Add(&record.Record{FailureClass: record.FailTimeout, Termination: "timeout"})
	sum := s.Summary()
	sum.FailuresByClass[record.FailTimeout] = 100
	sum.Terminations["x"] = 1
	s.Add(&record.Record{FailureClass: record.FailTimeout})
	got := s.Summary()
	if got.FailuresByClass[record.FailTimeout] != 2 || len(got.Terminations) != 1 {
		t.Errorf("the summary's maps are shared with the stats: %+v", got)
	}
	if sum.Rollouts != 1 {
		t.Errorf("the summary changed after Add: %+v", sum)
	}
}

func TestWriteSummaryJSON(t *testing.T) {
	var s Stats
	for _, r := range summaryFixture() {
		s.Add(&r)
	}
	want := s.Summary()
	want.SetScores(&Evaluate(summaryFixture(), StatsOptions{}).Overall)
	dir := t.TempDir()
	path := filepath.Join(dir, "summary.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteSummaryJSON(path, want); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("{\n  \"rollouts\": 7,\n")) {
		t.Errorf("not indented JSON: %s", data)
	}
	var got Summary
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
	var keys map[string]any
	json.Unmarshal(data, &keys)
	for _, k := range []string{"rollouts", "scored", "failed", "failures_by_class", "terminations", "tasks", "tasks_all_failed",
		"mean_reward", "std_err", "ci95", "mean_rounds", "mean_tool_calls", "mean_latency_ms", "prompt_tokens", "completion_tokens", "tool_errors", "failure_messages"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("key %q missing", k)
		}
	}
	if len(keys) != 17 {
		t.Errorf("got %d keys, want 17: %v", len(keys), keys)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left behind: %v", err)
	}

	t.Run("failures", func(t *testing.T) {
		if err := WriteSummaryJSON(filepath.Join(dir, "no", "summary.json"), want); err == nil {
			t.Error("missing directory: no error")
		}
		bad := want
		bad.MeanReward = math.NaN()
		p := filepath.Join(dir, "nan.json")
		if err := WriteSummaryJSON(p, bad); err == nil {
			t.Error("NaN: no error")
		}
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("NaN: file written: %v", err)
		}
		occupied := filepath.Join(dir, "occupied")
		if err := os.MkdirAll(filepath.Join(occupied, "x"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := WriteSummaryJSON(occupied, want); err == nil {
			t.Error("rename onto a directory: no error")
		}
		if _, err := os.Stat(occupied + ".tmp"); !os.IsNotExist(err) {
			t.Errorf("temporary file left behind: %v", err)
		}
	})
}

func TestPrintSummaryGolden(t *testing.T) {
	cases := []struct {
		name string
		recs []record.Record
	}{
		{"fixture", summaryFixture()},
		{"one scored", []record.Record{{Reward: 1, HasReward: true, Rounds: 1, Termination: "done"}}},
		{"empty", nil},
		{"tasks", slices.Concat(rollouts("m", 0, nil, 1, 1, 0), rollouts("m", 1, nil, 0, 0, 0), rollouts("m", 2, nil, 1, 1, 1),
			[]record.Record{{TaskIndex: 3, Arm: "m", SourceFile: "tasks.jsonl", FailureClass: record.FailTimeout}})},
	}
	var buf bytes.Buffer
	for _, c := range cases {
		var s Stats
		for i := range c.recs {
			s.Add(&c.recs[i])
		}
		sum := s.Summary()
		sum.SetScores(&Evaluate(c.recs, StatsOptions{}).Overall)
		buf.WriteString("== " + c.name + "\n")
		if err := PrintSummary(&buf, sum); err != nil {
			t.Fatal(err)
		}
	}
	golden := filepath.Join("testdata", "summary.golden")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got := buf.String(); got != string(want) {
		t.Errorf("PrintSummary output differs from %s (go test -update rewrites it):\n got:\n%s\nwant:\n%s", golden, got, want)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, os.ErrClosed }

func TestPrintSummaryWriteError(t *testing.T) {
	if err := PrintSummary(failingWriter{}, Summary{}); err == nil {
		t.Error("no error from a failing writer")
	}
}
