package report

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/rollout-dev/rollout/internal/durable"
	"github.com/rollout-dev/rollout/pkg/record"
)

// Stats keeps running statistics over records in O(1) memory in the number
// of records (the maps grow only with the number of distinct failure
// classes and terminations). The zero value is ready to use. Stats is not
// safe for concurrent use.
//
// A record is scored when it has a reward and no failure class; the reward,
// rounds, tool-call and latency means are over scored records only, so that
// infrastructure failures are reported apart and never scored as 0. Token and
// tool-error totals are over all records. The reward's standard error and
// interval need the tasks: they come from an Evaluation (Summary.SetScores).
type Stats struct {
	rollouts, scored, failed int
	failures                 map[string]int
	terminations             map[string]int
	// messages counts each failure class's error texts, up to maxMessages distinct ones per
	// class (later new texts are not counted), so that a summary can name the common cause.
	messages map[string]map[string]int

	// The running mean of the reward.
	rewardMean float64
	// Sums over scored records of the rounds and tool calls (integers: their means do not
	// depend on the order the records came in), and the running mean of the latency.
	roundsSum, toolCallsSum int64
	latencyMean             float64

	promptTokens, completionTokens, toolErrors int64
}

// Add counts one record.
func (s *Stats) Add(r *record.Record) {
	s.rollouts++
	if r.FailureClass != record.FailNone {
		s.failed++
		if s.failures == nil {
			s.failures = make(map[string]int)
		}
		s.failures[string(r.FailureClass)]++
		s.countMessage(string(r.FailureClass), r.Error)
	}
	if r.Termination != "" {
		if s.terminations == nil {
			s.terminations = make(map[string]int)
		}
		s.terminations[r.Termination]++
	}
	s.promptTokens += r.PromptTokens
	s.completionTokens += r.CompletionTokens
	s.toolErrors += int64(r.ToolErrors)

	if !r.HasReward || r.FailureClass != record.FailNone {
		return
	}
	s.scored++
	n := float64(s.scored)
	s.rewardMean += r.Reward/n - s.rewardMean/n // no overflow for huge finite rewards
	s.roundsSum += int64(r.Rounds)
	s.toolCallsSum += int64(r.ToolCalls)
	s.latencyMean += (r.LatencyMs - s.latencyMean) / n
}

// maxMessages bounds the distinct error texts Stats counts per failure class.
const maxMessages = 64

func (s *Stats) countMessage(class, msg string) {
	if msg == "" {
		return
	}
	if s.messages == nil {
		s.messages = make(map[string]map[string]int)
	}
	m := s.messages[class]
	if m == nil {
		m = make(map[string]int)
		s.messages[class] = m
	}
	if _, ok := m[msg]; ok || len(m) < maxMessages {
		m[msg]++
	}
}

// FailureMessage is the most common error text of a failure class.
type FailureMessage struct {
	Message string `json:"message"`
	Count   int    `json:"count"`
}

// Summary is a snapshot of Stats. Its maps are never nil and are not shared
// with the Stats.
type Summary struct {
	// Status is "" for a run with every rollout it planned, else what it is ("incomplete: 171
	// of 480 rollouts"); PrintSummary puts it first.
	Status          string         `json:"status,omitempty"`
	Rollouts        int            `json:"rollouts"`
	Scored          int            `json:"scored"`
	Failed          int            `json:"failed"`
	FailuresByClass map[string]int `json:"failures_by_class"`
	Terminations    map[string]int `json:"terminations"`
	// FailureMessages is each failure class's most common error text (nil without failures).
	FailureMessages map[string]FailureMessage `json:"failure_messages,omitempty"`
	// Tasks counts the tasks with a scored record; TasksAllFailed those every
	// record of which has a failure class.
	Tasks          int `json:"tasks"`
	TasksAllFailed int `json:"tasks_all_failed"`
	// MeanReward is over scored records only. StdErr is its task-clustered
	// standard error and CI95 its 95% interval, as in the Evaluation's overall
	// Scores (see Scores); StdErr is 0 below 2 tasks, CI95 nil when not
	// computed.
	MeanReward float64   `json:"mean_reward"`
	StdErr     float64   `json:"std_err"`
	CI95       *Interval `json:"ci95,omitempty"`
	// Means over scored records.
	MeanRounds    float64 `json:"mean_rounds"`
	MeanToolCalls float64 `json:"mean_tool_calls"`
	MeanLatencyMs float64 `json:"mean_latency_ms"`
	// Totals over all records.
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	ToolErrors       int64 `json:"tool_errors"`
	// Endpoints is the per-endpoint table of a run through a pool of model endpoints (nil
	// otherwise): the counters of the process that finished the run, not computed from the
	// records, kept as the JSON array the run gave (fleet.EndpointStats each; report does not
	// read it).
	Endpoints json.RawMessage `json:"endpoints,omitempty"`
}

// Progress is the few numbers a progress display needs, without the
// copies Summary makes: cheap enough to call after every record.
func (s *Stats) Progress() (rollouts, scored, failed int, meanReward float64) {
	return s.rollouts, s.scored, s.failed, s.rewardMean
}

// Summary returns the statistics so far.
func (s *Stats) Summary() Summary {
	out := Summary{
		Rollouts:         s.rollouts,
		Scored:           s.scored,
		Failed:           s.failed,
		FailuresByClass:  make(map[string]int, len(s.failures)),
		Terminations:     make(map[string]int, len(s.terminations)),
		MeanReward:       s.rewardMean,
		MeanRounds:       s.mean(s.roundsSum),
		MeanToolCalls:    s.mean(s.toolCallsSum),
		MeanLatencyMs:    s.latencyMean,
		PromptTokens:     s.promptTokens,
		CompletionTokens: s.completionTokens,
		ToolErrors:       s.toolErrors,
	}
	maps.Copy(out.FailuresByClass, s.failures)
	maps.Copy(out.Terminations, s.terminations)
	for class, m := range s.messages {
		var top FailureMessage
		for msg, n := range m {
			if n > top.Count || n == top.Count && msg < top.Message {
				top = FailureMessage{msg, n}
			}
		}
		if out.FailureMessages == nil {
			out.FailureMessages = make(map[string]FailureMessage, len(s.messages))
		}
		out.FailureMessages[class] = top
	}
	return out
}

// mean is sum over the scored records (0 without any).
func (s *Stats) mean(sum int64) float64 {
	if s.scored == 0 {
		return 0
	}
	return float64(sum) / float64(s.scored)
}

// SetScores takes the reward's numbers from sc, the Evaluation's overall Scores of the same
// records (with failures left out of the scores): the mean, its task-clustered standard
// error and interval, and the task counts.
func (s *Summary) SetScores(sc *Scores) {
	s.MeanReward, s.StdErr, s.Tasks, s.TasksAllFailed = sc.MeanReward, sc.StdErr, sc.Tasks, sc.TasksAllFailed
	s.CI95 = nil
	if sc.CI95 != nil {
		ci := *sc.CI95
		s.CI95 = &ci
	}
}

// WriteSummaryJSON writes s as indented JSON to path, through a temporary
// file that is synced and renamed.
func WriteSummaryJSON(path string, s Summary) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	data = append(data, '\n')
	if err := durable.WriteFileAtomic(path, data, 0o644); err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	return nil
}

// PrintSummary writes s to w as a compact, aligned table for people.
func PrintSummary(w io.Writer, s Summary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(label, value string) { fmt.Fprintf(tw, "%s\t%s\n", label, value) }

	if s.Status != "" {
		row("status", s.Status)
	}
	row("rollouts", strconv.Itoa(s.Rollouts))
	row("scored", strconv.Itoa(s.Scored))
	row("failed", strconv.Itoa(s.Failed))
	tasks := strconv.Itoa(s.Tasks)
	if s.TasksAllFailed > 0 {
		tasks += fmt.Sprintf(" (and %d whose rollouts all failed)", s.TasksAllFailed)
	}
	row("tasks", tasks)
	if s.Scored == 0 {
		row("mean reward", "-")
	} else {
		var detail []string
		if s.Tasks > 1 {
			detail = append(detail, fmt.Sprintf("std err %.4f", s.StdErr))
		} else {
			detail = append(detail, "one task: no std err")
		}
		if s.CI95 != nil {
			ci := fmt.Sprintf("95%% CI %.4f to %.4f", s.CI95.Low, s.CI95.High)
			if s.CI95.Point {
				ci += ", a point: every task has the same mean reward"
			}
			detail = append(detail, ci)
		}
		row("mean reward", fmt.Sprintf("%.4f (%s)", s.MeanReward, strings.Join(detail, ", ")))
	}
	row("failures", countList(s.FailuresByClass))
	for _, class := range slices.Sorted(maps.Keys(s.FailureMessages)) {
		m := s.FailureMessages[class]
		row("  "+class, fmt.Sprintf("%d× %s", m.Count, record.Clip(m.Message, 300)))
	}
	row("terminations", countList(s.Terminations))
	row("mean rounds", fmt.Sprintf("%.2f", s.MeanRounds))
	row("mean tool calls", fmt.Sprintf("%.2f", s.MeanToolCalls))
	row("tool errors", strconv.FormatInt(s.ToolErrors, 10))
	row("tokens", fmt.Sprintf("%d prompt, %d completion", s.PromptTokens, s.CompletionTokens))
	row("mean latency", fmt.Sprintf("%.1f ms", s.MeanLatencyMs))
	return tw.Flush()
}

// countList formats counts as "a 1, b 2", keys sorted; "-" when empty.
func countList(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	return b.String()
}
