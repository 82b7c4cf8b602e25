package report

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// summaryFixture: four scored rollouts with rewards 1, 0, 1, 1 and two
// failures, which must not count towards the means.
func summaryFixture() []Record {
	return []Record{
		{Reward: 1, HasReward: true, Rounds: 2, ToolCalls: 3, ToolErrors: 0, PromptTokens: 100, CompletionTokens: 10, LatencyMs: 1000, Termination: "done"},
		{Reward: 0, HasReward: true, Rounds: 4, ToolCalls: 5, ToolErrors: 2, PromptTokens: 200, CompletionTokens: 20, LatencyMs: 3000, Termination: "max_rounds"},
		{Reward: 1, HasReward: true, Rounds: 1, ToolCalls: 0, ToolErrors: 0, PromptTokens: 50, CompletionTokens: 5, LatencyMs: 500, Termination: "done"},
		{Reward: 1, HasReward: true, Rounds: 3, ToolCalls: 4, ToolErrors: 1, PromptTokens: 150, CompletionTokens: 15, LatencyMs: 1500, Termination: "done"},
		{FailureClass: FailRateLimited, Rounds: 9, ToolCalls: 9, ToolErrors: 1, PromptTokens: 1000, CompletionTokens: 0, LatencyMs: 60000, Error: "429"},
		{FailureClass: FailTimeout, Rounds: 7, ToolCalls: 2, PromptTokens: 500, CompletionTokens: 50, LatencyMs: 90000, Termination: "timeout"},
		// Inconsistent on purpose: a failure class wins over HasReward.
		{FailureClass: FailRateLimited, Reward: 1, HasReward: true, Rounds: 1},
	}
}

func TestStats(t *testing.T) {
	const eps = 1e-12
	tests := []struct {
		name string
		recs []Record
		want Summary
	}{
		{
			name: "zero value",
			want: Summary{FailuresByClass: map[string]int{}, Terminations: map[string]int{}},
		},
		{
			name: "one scored",
			recs: []Record{{Reward: 0.5, HasReward: true, Rounds: 3, ToolCalls: 2, LatencyMs: 10, Termination: "done"}},
			want: Summary{
				Rollouts: 1, Scored: 1,
				FailuresByClass: map[string]int{}, Terminations: map[string]int{"done": 1},
				MeanReward: 0.5, StdErr: 0, MeanRounds: 3, MeanToolCalls: 2, MeanLatencyMs: 10,
			},
		},
		{
			name: "only failures",
			recs: []Record{{FailureClass: FailBadTask}, {FailureClass: FailBadTask, PromptTokens: 5}},
			want: Summary{
				Rollouts: 2, Failed: 2,
				FailuresByClass: map[string]int{FailBadTask: 2}, Terminations: map[string]int{},
				PromptTokens: 5,
			},
		},
		{
			name: "fixture",
			recs: summaryFixture(),
			// Scored rewards 1,0,1,1: mean .75, sample variance
			// (3·.0625+.5625)/3 = .25, sd .5, se .5/2 = .25.
			want: Summary{
				Rollouts: 7, Scored: 4, Failed: 3,
				FailuresByClass: map[string]int{FailRateLimited: 2, FailTimeout: 1},
				Terminations:    map[string]int{"done": 3, "max_rounds": 1, "timeout": 1},
				MeanReward:      0.75, StdErr: 0.25,
				MeanRounds: 2.5, MeanToolCalls: 3, MeanLatencyMs: 1500,
				PromptTokens: 2000, CompletionTokens: 100, ToolErrors: 4,
			},
		},
		{
			name: "constant rewards",
			recs: []Record{{Reward: 0.3, HasReward: true}, {Reward: 0.3, HasReward: true}, {Reward: 0.3, HasReward: true}},
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

// TestStatsWelfordStable checks the running variance against a two-pass
// computation where a naive sum of squares loses every digit.
func TestStatsWelfordStable(t *testing.T) {
	var s Stats
	var xs []float64
	for i := range 1000 {
		x := 1e9 + float64(i%10)/10
		xs = append(xs, x)
		s.Add(&Record{Reward: x, HasReward: true})
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
	got := s.Summary()
	if math.Abs(got.MeanReward-mean) > 1e-6 || math.Abs(got.StdErr-wantSE)/wantSE > 1e-6 {
		t.Errorf("got mean %v se %v, want mean %v se %v", got.MeanReward, got.StdErr, mean, wantSE)
	}
}

func TestSummaryIsASnapshot(t *testing.T) {
	var s Stats
	s.Add(&Record{FailureClass: FailTimeout, Termination: "timeout"})
	sum := s.Summary()
	sum.FailuresByClass[FailTimeout] = 100
	sum.Terminations["x"] = 1
	s.Add(&Record{FailureClass: FailTimeout})
	got := s.Summary()
	if got.FailuresByClass[FailTimeout] != 2 || len(got.Terminations) != 1 {
		t.Errorf("the summary's maps are shared with the stats: %+v", got)
	}
	if sum.Rollouts != 1 {
		t.Errorf("the summary changed after Add: %+v", sum)
	}
}

func TestCI95(t *testing.T) {
	lo, hi := Summary{MeanReward: 0.75, StdErr: 0.25}.CI95()
	if math.Abs(lo-0.26) > 1e-12 || math.Abs(hi-1.24) > 1e-12 {
		t.Errorf("CI95: got [%v, %v], want [0.26, 1.24]", lo, hi)
	}
}

func TestWriteSummaryJSON(t *testing.T) {
	var s Stats
	for _, r := range summaryFixture() {
		s.Add(&r)
	}
	want := s.Summary()
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
	for _, k := range []string{"rollouts", "scored", "failed", "failures_by_class", "terminations", "mean_reward", "std_err",
		"mean_rounds", "mean_tool_calls", "mean_latency_ms", "prompt_tokens", "completion_tokens", "tool_errors"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("key %q missing", k)
		}
	}
	if len(keys) != 13 {
		t.Errorf("got %d keys, want 13: %v", len(keys), keys)
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
		recs []Record
	}{
		{"fixture", summaryFixture()},
		{"one scored", []Record{{Reward: 1, HasReward: true, Rounds: 1, Termination: "done"}}},
		{"empty", nil},
	}
	var buf bytes.Buffer
	for _, c := range cases {
		var s Stats
		for i := range c.recs {
			s.Add(&c.recs[i])
		}
		buf.WriteString("== " + c.name + "\n")
		if err := PrintSummary(&buf, s.Summary()); err != nil {
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
