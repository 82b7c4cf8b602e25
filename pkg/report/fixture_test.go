package report

import (
	"fmt"
	"time"

	"github.com/rollout-dev/rollout/pkg/record"
)

var fixtureStart = time.Date(2025, 3, 14, 15, 9, 26, 535_000_000, time.UTC)

// fixtureRecords returns n records that vary in every way that matters to
// the Parquet encoding: nil, empty and full maps and lists, failures with
// no reward, and zero and non-UTC timestamps.
func fixtureRecords(n int) []record.Record {
	recs := make([]record.Record, n)
	for i := range recs {
		r := record.Record{
			TaskIndex:        int64(i / 3),
			RolloutIndex:     int64(i % 3),
			TaskID:           fmt.Sprintf("task-%03d", i/3),
			Arm:              []string{"single", "multi"}[i%2],
			Agent:            "react",
			Model:            "sim-1",
			Reward:           float64(i%4) / 4,
			HasReward:        true,
			Rounds:           int32(i%5 + 1),
			ToolCalls:        int32(i % 7),
			ToolErrors:       int32(i % 2),
			PromptTokens:     int64(100 * i),
			CompletionTokens: int64(10 * i),
			LatencyMs:        float64(i) + 0.5,
			Termination:      "done",
			Attempts:         1,
			StartedAt:        fixtureStart.Add(time.Duration(i) * time.Second),
			Seed:             int64(1000 + i),
			SourceFile:       "tasks.jsonl",
			SourceLine:       int64(i/3 + 1),
		}
		switch i % 4 {
		case 0:
			r.RewardComponents = nil
		case 1:
			r.RewardComponents = map[string]float64{}
		default:
			r.RewardComponents = map[string]float64{"format": 1, "answer": r.Reward}
		}
		if i%2 == 0 {
			r.TaskFields = map[string]string{"category": fmt.Sprintf("c%d", i%3), "difficulty": "easy"}
		}
		switch i % 3 {
		case 0:
			r.ToolNames = nil
		case 1:
			r.ToolNames = []string{}
		default:
			r.ToolNames = []string{"search", "python", "search"}
		}
		if i%5 == 3 {
			r.FailureClass = record.FailModelUnavailable
			r.Error = fmt.Sprintf("dial tcp: connection refused (%d)", i)
			r.HasReward, r.Reward, r.RewardComponents = false, 0, nil
			r.Termination = ""
			r.Attempts = 3
		}
		if i%7 == 6 {
			r.StartedAt = time.Time{} // never started
		}
		if i%11 == 10 && !r.StartedAt.IsZero() {
			// Not UTC, and finer than the column's milliseconds.
			r.StartedAt = r.StartedAt.Add(123_456 * time.Nanosecond).In(time.FixedZone("UTC+5", 5*3600))
		}
		recs[i] = r
	}
	return recs
}
