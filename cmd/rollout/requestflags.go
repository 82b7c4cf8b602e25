package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/rollout-dev/rollout/pkg/agent"
)

// Request options (docs/requests.md): what every model call sends beyond rollout's own
// members. --request and --extra-body take JSON objects, merged in the order given as JSON
// Merge Patch does (null removes a member); the named flags are merged over them; per arm,
// "request:" in --config merges over the run's. A row's own options (the members of its
// responses_create_params that are not Responses fields) are merged first, under all these.

// requestFlags collects the request options of rollout run.
type requestFlags struct {
	objects []requestObject // --request and --extra-body, in the order given
	named   []namedOption   // the named flags given, in the order given
	stops   []string        // --stop, in the order given
}

// stopFlag is --stop: repeated, a list of stop strings.
type stopFlag struct{ r *requestFlags }

func (s stopFlag) String() string { return "" }
func (s stopFlag) Set(v string) error {
	if v == "" {
		return fmt.Errorf("want a non-empty string")
	}
	s.r.stops = append(s.r.stops, v)
	return nil
}

type requestObject struct {
	flag string
	json string
}

type namedOption struct {
	flag  string
	patch string // the JSON object the flag merges
}

// objectFlag is --request or --extra-body: repeated, each a JSON object.
type objectFlag struct {
	name string
	r    *requestFlags
}

func (o objectFlag) String() string { return "" }
func (o objectFlag) Set(v string) error {
	if err := agent.CheckRequest(json.RawMessage(v), "--"+o.name); err != nil {
		return plainError(err, "--"+o.name+": ")
	}
	o.r.objects = append(o.r.objects, requestObject{o.name, v})
	return nil
}

// namedFlag is one named sampling flag: parse turns its value into the JSON it sets.
type namedFlag struct {
	name  string
	r     *requestFlags
	parse func(string) (string, error)
}

func (n namedFlag) String() string { return "" }
func (n namedFlag) Set(v string) error {
	p, err := n.parse(v)
	if err != nil {
		return err
	}
	n.r.named = append(n.r.named, namedOption{n.name, p})
	return nil
}

// plainError drops a prefix the flag package adds again.
func plainError(err error, prefix string) error {
	return fmt.Errorf("%s", strings.TrimPrefix(err.Error(), prefix))
}

func numberIn(key string, lo, hi float64) func(string) (string, error) {
	return func(v string) (string, error) {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return "", fmt.Errorf("want a number, got %q", v)
		}
		if f < lo || f > hi {
			return "", fmt.Errorf("want a number in [%g, %g], got %g", lo, hi, f)
		}
		return fmt.Sprintf(`{%q:%s}`, key, strconv.FormatFloat(f, 'g', -1, 64)), nil
	}
}

// define adds the request flags to fs.
func (r *requestFlags) define(fs *flag.FlagSet) {
	fs.Var(objectFlag{"request", r}, "request", "`JSON` object merged into every model request (repeatable; null removes a member)")
	fs.Var(objectFlag{"extra-body", r}, "extra-body", "`JSON` object merged into every model request, as the OpenAI SDK's extra_body")
	named := func(name, usage string, parse func(string) (string, error)) {
		fs.Var(namedFlag{name, r, parse}, name, usage)
	}
	named("top-p", "nucleus sampling `P` (top_p), over the rows'", numberIn("top_p", 0, 1))
	named("top-k", "sample from the `K` most likely tokens (top_k; vLLM, llama.cpp, SGLang)", func(v string) (string, error) {
		k, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || k < -1 {
			return "", fmt.Errorf("want a whole number (-1 or 0: off), got %q", v)
		}
		return fmt.Sprintf(`{"top_k":%d}`, k), nil
	})
	named("min-p", "drop tokens under `P` times the likeliest's probability (min_p)", numberIn("min_p", 0, 1))
	named("presence-penalty", "presence_penalty `X` in [-2, 2]", numberIn("presence_penalty", -2, 2))
	named("frequency-penalty", "frequency_penalty `X` in [-2, 2]", numberIn("frequency_penalty", -2, 2))
	fs.Var(stopFlag{r}, "stop", "a stop `STRING` (repeatable: a list)")
	named("reasoning-effort", "reasoning_effort `E`: none, minimal, low, medium, high", func(v string) (string, error) {
		v = strings.TrimSpace(v)
		if v == "" || strings.IndexFunc(v, func(c rune) bool { return !(c >= 'a' && c <= 'z') }) >= 0 {
			return "", fmt.Errorf("want a word such as low, medium or high, got %q", v)
		}
		return fmt.Sprintf(`{"reasoning_effort":%q}`, v), nil
	})
	named("enable-thinking", "chat_template_kwargs.enable_thinking `BOOL` (Qwen3 and others on vLLM, SGLang, llama.cpp)", func(v string) (string, error) {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return "", fmt.Errorf("want true or false, got %q", v)
		}
		return fmt.Sprintf(`{"chat_template_kwargs":{"enable_thinking":%t}}`, b), nil
	})
	named("chat-template-kwargs", "`JSON` object merged into chat_template_kwargs (vLLM, SGLang)", func(v string) (string, error) {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(v), &obj); err != nil || obj == nil {
			return "", fmt.Errorf("want a JSON object, got %q", v)
		}
		return `{"chat_template_kwargs":` + strings.TrimSpace(v) + `}`, nil
	})
	named("repetition-penalty", "repetition_penalty `X` > 0 (1: none; vLLM, SGLang, llama.cpp)", func(v string) (string, error) {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
			return "", fmt.Errorf("want a number over 0, got %q", v)
		}
		return fmt.Sprintf(`{"repetition_penalty":%s}`, strconv.FormatFloat(f, 'g', -1, 64)), nil
	})
	named("logit-bias", "logit_bias `JSON`: {\"TOKEN_ID\": BIAS in [-100, 100], ...}", func(v string) (string, error) {
		var bias map[string]float64
		if err := json.Unmarshal([]byte(v), &bias); err != nil || bias == nil {
			return "", fmt.Errorf("want a JSON object of token ids to numbers, got %q", v)
		}
		for id, b := range bias {
			if n, err := strconv.ParseUint(id, 10, 32); err != nil || strconv.FormatUint(n, 10) != id {
				return "", fmt.Errorf("%q is not a token id (a whole number)", id)
			}
			if b < -100 || b > 100 {
				return "", fmt.Errorf("token %s: bias %g, want [-100, 100]", id, b)
			}
		}
		out, _ := json.Marshal(map[string]map[string]float64{"logit_bias": bias})
		return string(out), nil
	})
}

// requestFlagNames are the request flags, for --help.
var requestFlagNames = []string{"request", "extra-body", "top-p", "top-k", "min-p", "presence-penalty", "frequency-penalty",
	"stop", "reasoning-effort", "enable-thinking", "chat-template-kwargs", "repetition-penalty", "logit-bias"}

// build is the run's request options: --request and --extra-body merged in order, then the
// named flags, in the canonical form the manifest keeps (nil: none).
func (r *requestFlags) build() (json.RawMessage, error) {
	var merged json.RawMessage = []byte("{}")
	var err error
	for _, o := range r.objects {
		if merged, err = agent.ComposePatch(merged, json.RawMessage(o.json)); err != nil {
			return nil, badUsage("--%s: %v", o.flag, err)
		}
	}
	for _, n := range r.named {
		if merged, err = agent.ComposePatch(merged, json.RawMessage(n.patch)); err != nil {
			return nil, badUsage("--%s: %v", n.flag, err)
		}
	}
	if len(r.stops) > 0 {
		b, _ := json.Marshal(map[string][]string{"stop": r.stops})
		if merged, err = agent.ComposePatch(merged, b); err != nil {
			return nil, badUsage("--stop: %v", err)
		}
	}
	return agent.CanonicalRequest(merged)
}
