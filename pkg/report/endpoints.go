package report

// EndpointStats are one endpoint's counters, for the summary and for metrics: plain values,
// a copy taken by
// fleet.Pool.Stats, and summary.json's per-endpoint table.
type EndpointStats struct {
	Name  string `json:"name"`
	URL   string `json:"url"` // redacted of credentials
	Model string `json:"model,omitempty"`
	// Calls counts the attempts sent there (retries included); Failures counts the failed ones
	// by failure class (rate_limited, model_unavailable, timeout, model_error, cancelled).
	Calls    int64            `json:"calls"`
	Failures map[string]int64 `json:"failures_by_class"`
	// LatencyP50Ms and LatencyP99Ms are over the answered attempts (within 5%: a histogram).
	LatencyP50Ms     float64 `json:"latency_p50_ms"`
	LatencyP99Ms     float64 `json:"latency_p99_ms"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	Ejections        int64   `json:"ejections"`
	// Ejected, InFlight and Limit are the state when the copy was taken (Limit 0: no limit).
	Ejected  bool    `json:"ejected"`
	InFlight int     `json:"in_flight"`
	Limit    float64 `json:"limit,omitempty"`
}
