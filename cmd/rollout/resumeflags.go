package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"github.com/rollout-dev/rollout/internal/redact"
	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/rundir"
	"github.com/rollout-dev/rollout/pkg/runner"
)

// resumeDefaults gives rollout run --resume --out DIR the run's own settings: every flag that
// changes results and was not given (on the command line, in the environment or in --config)
// is set from DIR's manifest.json, so that "rollout run --resume --out DIR" alone finishes the
// run. A flag that was given keeps its value: one that may change (concurrency, timeouts,
// endpoints' retries) simply does, one that changes results is then refused without --force.
// It returns the run's arms and workflow steps when they were not given.
func resumeDefaults(fs *flag.FlagSet, out string) (arms []runner.Arm, steps *agent.Workflow, err error) {
	mf, err := rundir.ReadManifest(out)
	if errors.Is(err, os.ErrNotExist) {
		if rundir.JournalLines(out) > 0 {
			return nil, nil, nil // records without a manifest: the flags given must say what the run was
		}
		return nil, nil, badUsage("--resume: %s holds no run to resume (no %s, no records)", out, rundir.ManifestFile)
	}
	if err != nil {
		return nil, nil, badUsage("--resume: %v", err)
	}
	var cfg runConfig
	if err := json.Unmarshal(mf.Config, &cfg); err != nil {
		return nil, nil, badUsage("--resume: %s/%s: config: %v", out, rundir.ManifestFile, err)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	set := func(name, value string) {
		if err == nil && !given[name] {
			if e := fs.Set(name, value); e != nil {
				err = badUsage("--resume: %s/%s: --%s %s: %v", out, rundir.ManifestFile, name, value, e)
			}
		}
	}
	if mf.Input != "-" {
		set("input", mf.Input)
	}
	if mf.JSONLOut != "" {
		set("jsonl-out", mf.JSONLOutPath(out))
	}
	if mf.Shard != nil {
		set("shard", mf.Shard.String())
	}
	// A URL whose secrets the manifest does not keep must be given again.
	if u := cfg.ModelURL; u != redact.URL(u) || strings.Contains(u, "REDACTED") {
		if !given["model-url"] {
			return nil, nil, badUsage("--resume: the run's --model-url held a password or query values, which %s does not keep: give --model-url again", rundir.ManifestFile)
		}
	} else {
		set("model-url", u)
	}
	set("model", cfg.Model)
	if !given["server"] {
		for _, s := range cfg.Servers {
			if strings.Contains(serverURL(s), "REDACTED") {
				return nil, nil, badUsage("--resume: the run's --server %s held a password or query values, which %s does not keep: give the --server flags again", s, rundir.ManifestFile)
			}
		}
		for _, s := range cfg.Servers {
			if e := fs.Set("server", s); e != nil && err == nil {
				err = badUsage("--resume: --server %s: %v", s, e)
			}
		}
	}
	set("tool-mode", cfg.ToolMode)
	set("num-repeats", strconv.Itoa(cfg.Repeats))
	set("limit", strconv.Itoa(cfg.Limit))
	if len(cfg.SampleIDs) > 0 {
		set("sample-id", strings.Join(cfg.SampleIDs, ","))
	}
	set("max-rounds", strconv.Itoa(cfg.MaxRounds))
	set("max-failed-rounds", strconv.Itoa(cfg.MaxFailedRounds))
	set("max-tokens", strconv.Itoa(cfg.MaxTokens))
	if cfg.Temperature != nil {
		set("temperature", strconv.FormatFloat(*cfg.Temperature, 'g', -1, 64))
	}
	set("seed", strconv.FormatInt(cfg.Seed, 10))
	if cfg.CaptureTokens {
		set("capture-tokens", "true")
	}
	if cfg.Context != "" {
		set("context", cfg.Context)
	}
	if cfg.Degrade {
		set("degrade", "true")
	}
	if len(cfg.Request) > 0 {
		set("request", string(cfg.Request))
	}
	if cfg.BriefingPrompt != "" {
		set("briefing-prompt", cfg.BriefingPrompt)
	}
	for knob, v := range cfg.Sim {
		name := "sim-" + kebab(knob)
		if fs.Lookup(name) == nil {
			return nil, nil, badUsage("--resume: %s/%s: the simulator's %s has no flag --%s in this version", out, rundir.ManifestFile, knob, name)
		}
		set(name, v)
	}
	if err != nil {
		return nil, nil, err
	}
	if !given["arms"] && !given["arm"] {
		for _, a := range cfg.Arms {
			arm, e := parseArmName(a)
			if e != nil {
				return nil, nil, badUsage("--resume: %s/%s: arm %q: %v", out, rundir.ManifestFile, a, e)
			}
			arms = append(arms, arm)
		}
	}
	if !given["steps"] {
		steps = cfg.Steps
	}
	return arms, steps, nil
}

// parseArmName reads an arm as the manifest names it: NAME=POLICY[,max-rounds=N][,tool-mode=M].
func parseArmName(s string) (runner.Arm, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok {
		return runner.Arm{}, fmt.Errorf("want NAME=POLICY")
	}
	// request=JSON is the last setting: its JSON may hold commas.
	rest, req, hasReq := strings.Cut(rest, ",request=")
	parts := strings.Split(rest, ",")
	a := runner.Arm{Name: name, Policy: parts[0]}
	if hasReq {
		if err := agent.CheckRequest(json.RawMessage(req), "request"); err != nil {
			return runner.Arm{}, err
		}
		a.Request = json.RawMessage(req)
	}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "max-rounds":
			n, err := strconv.Atoi(v)
			if err != nil {
				return runner.Arm{}, fmt.Errorf("max-rounds %q", v)
			}
			a.MaxRounds = n
		case "tool-mode":
			a.ToolMode = v
		default:
			if ok, err := armSetting(&a, k, v); !ok || err != nil {
				return runner.Arm{}, fmt.Errorf("unknown setting %q (%v)", k, err)
			}
		}
	}
	return a, nil
}

// flagDiff names a manifest difference ("num_repeats was 1, now 2", "sim.Seed was "1", now
// "2"") by the flag that sets it ("--num-repeats was 1, now 2", "--sim-seed was 1, now 2").
func flagDiff(d string) string {
	key, rest, ok := strings.Cut(d, " was ")
	if !ok || !configKey.MatchString(key) {
		return d // "the input differs: ...", "--jsonl-out was ...": already in a person's words
	}
	name := ""
	if knob, isSim := strings.CutPrefix(key, "sim."); isSim {
		name = "sim-" + kebab(knob)
	} else {
		name = map[string]string{"servers": "server", "tool_mode": "tool-mode", "model_url": "model-url"}[key]
		if name == "" {
			name = strings.ReplaceAll(key, "_", "-")
		}
	}
	return "--" + name + " was " + strings.ReplaceAll(rest, `"`, "")
}

// configKey is a runConfig member's name, or sim.Knob.
var configKey = regexp.MustCompile(`^[a-z_]+(\.[A-Za-z0-9]+)?$`)

// kebab turns a Go field name into a flag name: HTTP429 → http-429, WrongArgument → wrong-argument.
func kebab(s string) string {
	var b strings.Builder
	for i, r := range s {
		prevLower := i > 0 && (unicode.IsLower(rune(s[i-1])) || unicode.IsDigit(rune(s[i-1])))
		switch {
		case unicode.IsUpper(r) && prevLower:
			b.WriteByte('-')
		case unicode.IsDigit(r) && i > 0 && !unicode.IsDigit(rune(s[i-1])):
			b.WriteByte('-')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}
