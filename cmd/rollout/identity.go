package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/rollout-dev/rollout/internal/redact"
	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/runner"
	"github.com/rollout-dev/rollout/pkg/sim"
)

// A run's identity: the settings that make its results what they are, kept in the manifest
// so that a resume with other ones is refused.

// runConfig is what makes a run's results what they are; its hash is in the manifest, and a
// resume with another one is refused unless --force. Concurrency, timeouts and retries are not
// in it: they may change between resumes.
type runConfig struct {
	Arms            []string          `json:"arms"`
	Steps           *agent.Workflow   `json:"steps,omitempty"`
	ToolMode        string            `json:"tool_mode"`
	Repeats         int               `json:"num_repeats"`
	Limit           int               `json:"limit"`
	SampleIDs       []string          `json:"sample_ids,omitempty"` // --sample-id, in the order given
	ModelURL        string            `json:"model_url"`
	Model           string            `json:"model"`
	Servers         []string          `json:"servers"`
	MaxRounds       int               `json:"max_rounds"`
	MaxFailedRounds int               `json:"max_failed_rounds"`
	MaxTokens       int               `json:"max_tokens"`
	Temperature     *float64          `json:"temperature"`
	Seed            int64             `json:"seed"`
	MaxToolCalls    int               `json:"max_tool_calls,omitempty"` // when not the default
	Sim             map[string]string `json:"sim,omitempty"`            // the simulator's knobs, with builtin:sim
	CaptureTokens   bool              `json:"capture_tokens,omitempty"` // what the trajectories keep
	// Context, Degrade and BriefingPrompt are --context (one strategy for every arm), --degrade
	// and --briefing-prompt FILE with the SHA-256 of its text; left out when not given.
	Context              string `json:"context,omitempty"`
	Degrade              bool   `json:"degrade,omitempty"`
	BriefingPrompt       string `json:"briefing_prompt,omitempty"`
	BriefingPromptSHA256 string `json:"briefing_prompt_sha256,omitempty"`
	// Request is the run's request options (--request, --extra-body and the named sampling
	// flags merged, canonical); left out when none were given.
	Request json.RawMessage `json:"request,omitempty"`
}

// redactServers is --server's values with the credentials of their URLs redacted, for the
// manifest.
func redactServers(specs []string) []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = strings.TrimSuffix(s, serverURL(s)) + redact.URL(serverURL(s))
	}
	return out
}

// serverURL is the URL of a --server value: URL, or NAME=URL.
func serverURL(spec string) string {
	if n, u, ok := strings.Cut(spec, "="); ok && !strings.Contains(n, ":") {
		return u
	}
	return spec
}

// maxToolCallsConfig is --max-tool-calls in the run's identity: 0 (left out) at the default, so
// that a run from before the flag resumes without --force.
func maxToolCallsConfig(n int) int {
	if n == agent.DefaultMaxToolCalls {
		return 0
	}
	return n
}

// knobValues lists the simulator's knobs that are set, by name (its Options' fields; functions
// and zero values left out), so that every knob is part of the run's identity, and a knob
// added in a later version, unset, does not change it.
func knobValues(o sim.Options) map[string]string {
	m := map[string]string{}
	v := reflect.ValueOf(o)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() != reflect.Func && !f.IsZero() {
			m[v.Type().Field(i).Name] = fmt.Sprint(f.Interface())
		}
	}
	return m
}

// newRunConfig is the identity of a run of opts (its arms, agent settings and repeats), started
// with flags f; simOpts is the simulator's options with --model-url builtin:sim, else nil.
func newRunConfig(f runFlags, opts *runner.Options, simOpts *sim.Options) runConfig {
	var armNames []string
	for _, a := range opts.Arms {
		name := a.Name + "=" + a.Policy
		if a.MaxRounds > 0 {
			name += fmt.Sprintf(",max-rounds=%d", a.MaxRounds)
		}
		if a.ToolMode != "" {
			name += ",tool-mode=" + a.ToolMode
		}
		name += armSettings(a)
		armNames = append(armNames, name)
	}
	cfg := runConfig{Arms: armNames, Steps: opts.Agent.Workflow, ToolMode: f.toolMode, Repeats: opts.Repeats, Limit: f.limit, SampleIDs: f.sampleIDs,
		ModelURL: redactURLs(f.modelURL), Model: opts.Agent.ModelName, Servers: redactServers(f.servers),
		MaxRounds: opts.Agent.MaxRounds, MaxFailedRounds: opts.Agent.MaxFailedRounds, MaxTokens: f.maxTokens,
		Temperature: opts.Agent.Temperature, Seed: f.seed, MaxToolCalls: maxToolCallsConfig(f.maxToolCalls), CaptureTokens: f.captureTokens}
	if simOpts != nil {
		cfg.Sim = knobValues(*simOpts)
	}
	if opts.Agent.Context.Kind != "" {
		cfg.Context = opts.Agent.Context.String()
	}
	cfg.Degrade = opts.Agent.Degrade
	cfg.Request = opts.Agent.Request
	if f.ctx.briefingPrompt != "" {
		sum := sha256.Sum256([]byte(opts.Agent.BriefingPrompt))
		cfg.BriefingPrompt, cfg.BriefingPromptSHA256 = f.ctx.briefingPrompt, hex.EncodeToString(sum[:])
	}
	return cfg
}
