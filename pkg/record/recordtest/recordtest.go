// Package recordtest makes records for tests and benchmarks: a small fixture that varies in
// every way the JSON and Parquet encodings care about, and the records and trajectories of a
// realistic large run.
package recordtest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/pkg/record"
)

var fixtureStart = time.Date(2025, 3, 14, 15, 9, 26, 535_000_000, time.UTC)

// Fixture returns n records that vary in every way that matters to
// the Parquet encoding: nil, empty and full maps and lists, failures with
// no reward, and zero and non-UTC timestamps.
func Fixture(n int) []record.Record {
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
		switch i % 6 {
		case 1:
			r.Context, r.ContextTokens = "full", []int64{}
		case 2:
			r.Context, r.ContextTokens, r.ContextTokensMax = "window:2", []int64{812, 1020, 640}, 1020
			r.ContextRemovedMessages, r.ContextRemovedBytes = 4, 9_000_000_000
		case 5:
			r.Context, r.ContextTokens, r.ContextTokensMax, r.BriefingCalls = "briefing", []int64{-1, 0, 1 << 40}, 1<<40, 2
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

// mix is splitmix64: a reproducible pseudo-random number for each record index.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

var (
	benchArms       = []string{"single", "multi"}
	benchTools      = []string{"list_databases", "find_records", "fetch_record", "read_value", "submit_answer"}
	benchCategories = []string{"finance", "logistics", "retail", "health", "energy", "telecom"}
	benchLevels     = []string{"easy", "medium", "hard"}
	benchTerms      = []string{"completed", "completed", "completed", "completed", "completed", "completed", "tool_error", "max_rounds"}
	benchFailures   = []struct {
		class record.FailureClass
		err   string
	}{
		{record.FailRateLimited, "model: 429 Too Many Requests: rate limit reached for requests, retry after 2s"},
		{record.FailTimeout, "rollout: context deadline exceeded after 120s (round 4)"},
		{record.FailModelUnavailable, "model: dial tcp 10.0.3.17:8000: connect: connection refused"},
		{record.FailResourceServer, `resource server: POST /fetch_record: 500 Internal Server Error: {"detail":"db locked"}`},
		{record.FailBadTask, "task: responses_create_params.input: empty"},
	}
	benchStart = time.Date(2026, 11, 21, 9, 30, 0, 0, time.UTC)
)

// Realistic is the i-th record of a realistic run of 125,000 tasks × 2 arms × 4 repeats:
// two task fields, two or three tool names and reward components, about 3% failures (with
// an error message and no reward), nanosecond start times in UTC.
func Realistic(i int) record.Record {
	h := mix(uint64(i))
	task := int64(i / 8)
	r := record.Record{
		TaskIndex:        task,
		RolloutIndex:     int64(i % 4),
		TaskID:           "extraction-" + strconv.FormatInt(100000+task, 10),
		Arm:              benchArms[(i/4)%2],
		Agent:            "react",
		Model:            "Qwen/Qwen3-8B",
		Rounds:           int32(1 + h%7),
		ToolCalls:        int32(2 + h>>8%24),
		ToolErrors:       int32(h >> 16 % 3),
		PromptTokens:     int64(400 + h>>20%6000),
		CompletionTokens: int64(20 + h>>32%400),
		LatencyMs:        float64(300_000+h>>40%4_000_000) / 1000,
		Termination:      benchTerms[h>>44%uint64(len(benchTerms))],
		Attempts:         1,
		StartedAt:        benchStart.Add(time.Duration(i)*37*time.Millisecond + time.Duration(h%1_000_000)),
		Seed:             int64(h >> 1),
		SourceFile:       "data/extraction.jsonl",
		SourceLine:       task + 1,
		TaskFields:       map[string]string{"category": benchCategories[task%6], "difficulty": benchLevels[task%3]},
	}
	n := 2 + int(h>>48%2)
	r.ToolNames = benchTools[h>>50%3 : h>>50%3+uint64(n)]
	if h>>52%100 < 3 {
		f := benchFailures[h>>56%uint64(len(benchFailures))]
		r.FailureClass, r.Error, r.Termination, r.Attempts = f.class, f.err, "", 3
		return r
	}
	r.HasReward = true
	answer := float64(h>>54%2) * 0.9
	r.RewardComponents = map[string]float64{"answer": answer, "format": 0.1}
	r.Reward = answer + 0.1
	if n == 3 {
		eff := float64(h>>58%8) / 8
		r.RewardComponents["efficiency"] = eff
		r.Reward += eff / 10
	}
	return r
}

// Trajectory is a trajectory of about size bytes of JSON for record i.
func Trajectory(i int, size int) json.RawMessage {
	var b strings.Builder
	fmt.Fprintf(&b, `{"messages":[{"role":"user","content":"Sum the order values of region eu-%d."}`, i%7)
	for j := 0; b.Len() < size-80; j++ {
		fmt.Fprintf(&b, `,{"role":"assistant","tool_calls":[{"id":"call_%d_%d","name":"%s","arguments":{"region":"eu-%d","id":%d}}]}`,
			i, j, benchTools[j%len(benchTools)], i%7, j)
		fmt.Fprintf(&b, `,{"role":"tool","call_id":"call_%d_%d","content":"{\"value\":%d.5}"}`, i, j, i%1000+j)
	}
	b.WriteString(`],"final":"42"}`)
	return json.RawMessage(b.String())
}

// Diff compares two records as they survive Parquet: nil and empty
// maps and lists are equal, and times are equal to the millisecond
// regardless of location.
func Diff(got, want record.Record) string {
	norm := func(r record.Record) record.Record {
		if len(r.RewardComponents) == 0 {
			r.RewardComponents = nil
		}
		if len(r.ToolNames) == 0 {
			r.ToolNames = nil
		}
		if len(r.ContextTokens) == 0 {
			r.ContextTokens = nil
		}
		if len(r.TaskFields) == 0 {
			r.TaskFields = nil
		}
		if r.StartedAt.IsZero() {
			r.StartedAt = time.Time{}
		} else {
			r.StartedAt = r.StartedAt.Truncate(time.Millisecond).UTC()
		}
		return r
	}
	g, w := norm(got), norm(want)
	if !reflect.DeepEqual(g, w) {
		return fmt.Sprintf("got  %+v\nwant %+v", g, w)
	}
	return ""
}

// WriteRealistic hands write n results: Realistic(i) with a trajectory of 300 to 500 bytes
// (from a pool of 512), reusing one Result (write must not keep it).
func WriteRealistic(n int, write func(*record.Result) error) error {
	const pool = 512
	trajs := make([]json.RawMessage, pool)
	for i := range trajs {
		trajs[i] = Trajectory(i, 300+i%200)
	}
	res := &record.Result{}
	for i := range n {
		res.Record = Realistic(i)
		res.Trajectory = trajs[i%pool]
		if err := write(res); err != nil {
			return err
		}
	}
	return nil
}
