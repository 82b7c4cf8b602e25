package record

import (
	"strings"
	"time"
)

// Record is the one line of output a rollout ends in, success or
// failure. It is keyed by (TaskIndex, RolloutIndex, Arm).
//
// A record with an empty FailureClass has a reward; a record with a failure
// class has HasReward false and Reward 0, and statistics leave it out.
type Record struct {
	TaskIndex    int64  `parquet:"task_index" json:"task_index"`
	RolloutIndex int64  `parquet:"rollout_index" json:"rollout_index"`
	TaskID       string `parquet:"task_id" json:"task_id"`
	// TaskHash names a row without an id by its content: the first 16 hex digits of the
	// SHA-256 of the row's bytes ("" when the row has an id, and in records of older runs).
	// rollout compare matches tasks by it when the rows have no id.
	TaskHash         string             `parquet:"task_hash" json:"task_hash,omitempty"`
	Arm              string             `parquet:"arm" json:"arm"`
	Agent            string             `parquet:"agent" json:"agent"`
	Model            string             `parquet:"model" json:"model"`
	Endpoint         string             `parquet:"endpoint" json:"endpoint,omitempty"` // of a pool, the one that answered the first model call ("": one endpoint)
	Reward           float64            `parquet:"reward" json:"reward"`
	HasReward        bool               `parquet:"has_reward" json:"has_reward"`
	RewardComponents map[string]float64 `parquet:"reward_components" json:"reward_components,omitempty"`
	Rounds           int32              `parquet:"rounds" json:"rounds"`
	ToolCalls        int32              `parquet:"tool_calls" json:"tool_calls"`
	ToolNames        []string           `parquet:"tool_names,list" json:"tool_names"`
	ToolErrors       int32              `parquet:"tool_errors" json:"tool_errors"`
	PromptTokens     int64              `parquet:"prompt_tokens" json:"prompt_tokens"`
	CompletionTokens int64              `parquet:"completion_tokens" json:"completion_tokens"`
	LatencyMs        float64            `parquet:"latency_ms" json:"latency_ms"`
	Termination      string             `parquet:"termination" json:"termination"`
	FailureClass     FailureClass       `parquet:"failure_class" json:"failure_class"`
	Error            string             `parquet:"error" json:"error"`
	Attempts         int32              `parquet:"attempts" json:"attempts"`
	StartedAt        time.Time          `parquet:"started_at,optional,timestamp(millisecond)" json:"started_at"`
	Seed             int64              `parquet:"seed" json:"seed"`
	SourceFile       string             `parquet:"source_file" json:"source_file"`
	SourceLine       int64              `parquet:"source_line" json:"source_line"`
	// Context is the arm's context strategy (full, window:N, budget:TOKENS, briefing; "" when
	// the run set none: full). ContextTokens is the prompt tokens of each round's request, as
	// the endpoint's usage counted them; ContextTokensMax the largest; ContextRemovedMessages and
	// ContextRemovedBytes sum, over the rounds' requests, the messages and bytes the strategy
	// left out of the whole conversation; BriefingCalls counts the briefing strategy's extra
	// model calls (their tokens are in prompt_tokens and completion_tokens).
	Context                string  `parquet:"context" json:"context,omitempty"`
	ContextTokens          []int64 `parquet:"context_tokens,list" json:"context_tokens,omitempty"`
	ContextTokensMax       int64   `parquet:"context_tokens_max" json:"context_tokens_max,omitempty"`
	ContextRemovedMessages int32   `parquet:"context_removed_messages" json:"context_removed_messages,omitempty"`
	ContextRemovedBytes    int64   `parquet:"context_removed_bytes" json:"context_removed_bytes,omitempty"`
	BriefingCalls          int32   `parquet:"briefing_calls" json:"briefing_calls,omitempty"`
	// TaskFields are the row's small scalar top-level fields (e.g. category, difficulty), as
	// text, so that results can be grouped by them offline (rollout report --group-by).
	TaskFields map[string]string `parquet:"task_fields" json:"task_fields,omitempty"`
}

// FailureClass says why infrastructure or input failed a rollout; it is empty on success.
// In JSON and Parquet it is a plain string column, failure_class.
type FailureClass string

// Failure classes.
const (
	FailNone             FailureClass = ""
	FailBadTask                       = "bad_task"
	FailModelUnavailable              = "model_unavailable"
	FailRateLimited                   = "rate_limited"
	FailModelError                    = "model_error"
	FailResourceServer                = "resource_server"
	FailVerify                        = "verify"
	FailTimeout                       = "timeout"
	FailCancelled                     = "cancelled"
)

// Clip shortens a message for a record's error column (and other error
// text): trimmed, at most n bytes, never cutting a character in two. An
// HTML error page or a huge body must not fill the record.
func Clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}

// Infra reports whether the failure class is one --retry-failed runs again: every class
// but bad_task. model_error is among them: an answer of the model's endpoint that is not a
// usable chat completion (a 4xx other than 429 and context length, a body that is not a
// completion or has no choices, an answer over --max-model-answer) says the endpoint or its
// configuration failed, not the task; like the other failures it is left out of the scores
// unless they are scored as zero.
func (c FailureClass) Infra() bool {
	switch c {
	case FailModelUnavailable, FailRateLimited, FailModelError, FailResourceServer, FailVerify, FailTimeout, FailCancelled:
		return true
	}
	return false
}

// Transient reports whether the failure class says the infrastructure had a bad moment
// rather than that the model or its configuration failed: the endpoint was unreachable,
// overloaded or rate-limiting, a resource server failed, a call timed out, or an interrupt cut
// the rollout short. Running such a rollout again later may succeed: rollout run --resume=auto
// does, and a run whose failures are all transient exits with its own code so that a
// scheduler retries it.
func (c FailureClass) Transient() bool {
	switch c {
	case FailModelUnavailable, FailRateLimited, FailResourceServer, FailTimeout, FailCancelled:
		return true
	}
	return false
}
