package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/runner"
)

// A run config file (YAML) holds `rollout run` flags by their names, so that a run can be kept
// and repeated:
//
//	input: data/extraction.jsonl
//	out: out/qwen
//	model-url: http://localhost:8000/v1
//	model: Qwen/Qwen3-8B
//	server: [builtin:extraction]
//	num-repeats: 4
//	sim-profile: realistic
//	arms:
//	  - single
//	  - multi
//	  - {name: multi-20, policy: multi, max-rounds: 20}
//
// A key may be spelled in snake_case as NeMo Gym's configs are (num_repeats: 4). A key that is
// not a flag of rollout run is an error naming FILE:LINE. "arms" lists policy
// names, or arms with their own settings: name, policy, max-rounds, tool-mode (native, json),
// context (full, window:N, budget:TOKENS, briefing), degrade (true, false). Flags on the command line
// override the file (a repeated flag such as --server adds to the file's list).

// configArg finds --config FILE (or -config, --config=FILE) among args.
func configArg(args []string) (string, error) {
	for i, a := range args {
		if a == "--" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "config" {
			continue
		}
		if hasVal {
			return val, nil
		}
		if i+1 >= len(args) {
			return "", badUsage("--config needs a FILE")
		}
		return args[i+1], nil
	}
	return "", nil
}

// applyConfig sets fs's flags from the YAML file at path and returns the arms it lists.
func applyConfig(fs *flag.FlagSet, path string) ([]runner.Arm, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, badUsage("--config: %v", err)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, badUsage("%s: %v", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil, badUsage("%s:%d: want a mapping of flag names to values", path, top.Line)
	}
	at := func(n *yaml.Node, format string, args ...any) error {
		return badUsage("%s:%d: %s", path, n.Line, fmt.Sprintf(format, args...))
	}
	var arms []runner.Arm
	seen := map[string]bool{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		// NeMo Gym's snake_case spellings (num_repeats) name the same flags.
		key := strings.ReplaceAll(k.Value, "_", "-")
		if seen[key] {
			return nil, at(k, "%s given twice", key)
		}
		seen[key] = true
		if key == "arms" {
			if arms, err = configArms(v, at); err != nil {
				return nil, err
			}
			continue
		}
		if key == "endpoints" {
			continue // configEndpoints reads it
		}
		if key == "config" {
			return nil, at(k, "a config file cannot name another")
		}
		f := fs.Lookup(key)
		if f == nil {
			return nil, at(k, "unknown key %q: the keys are the flags of rollout run (rollout run --help), and arms", k.Value)
		}
		var values []*yaml.Node
		if _, isObject := f.Value.(objectFlag); isObject && v.Kind == yaml.MappingNode {
			req, err := yamlRequest(v, key)
			if err != nil {
				return nil, at(v, "%v", err)
			}
			v = &yaml.Node{Kind: yaml.ScalarNode, Value: string(req), Line: v.Line}
		}
		switch v.Kind {
		case yaml.ScalarNode:
			values = []*yaml.Node{v}
		case yaml.SequenceNode:
			_, servers := f.Value.(*serverFlags)
			_, stops := f.Value.(stopFlag)
			if !servers && !stops {
				return nil, at(v, "%s takes one value, not a list", key)
			}
			values = v.Content
		default:
			return nil, at(v, "%s: want a value", key)
		}
		for _, val := range values {
			if val.Kind != yaml.ScalarNode {
				return nil, at(val, "%s: want a value", key)
			}
			if err := fs.Set(key, val.Value); err != nil {
				return nil, at(val, "%s: %v", key, err)
			}
		}
	}
	return arms, nil
}

// yamlRequest is request options given in a config file: a YAML mapping, or a JSON object as
// a string; checked as --request is, in canonical form.
func yamlRequest(v *yaml.Node, what string) (json.RawMessage, error) {
	var raw json.RawMessage
	switch v.Kind {
	case yaml.ScalarNode:
		raw = json.RawMessage(v.Value)
	case yaml.MappingNode:
		var m map[string]any
		if err := v.Decode(&m); err != nil {
			return nil, fmt.Errorf("%s: %v", what, err)
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", what, err)
		}
		raw = b
	default:
		return nil, fmt.Errorf("%s: want a mapping of request members, such as {top_k: 20}", what)
	}
	if err := agent.CheckRequest(raw, what); err != nil {
		return nil, err
	}
	return agent.CanonicalRequest(raw)
}

// configArms reads the arms list: policy names, or {name, policy, max-rounds, tool-mode}.
func configArms(v *yaml.Node, at func(*yaml.Node, string, ...any) error) ([]runner.Arm, error) {
	if v.Kind != yaml.SequenceNode {
		return nil, at(v, "arms: want a list")
	}
	var arms []runner.Arm
	for _, item := range v.Content {
		switch item.Kind {
		case yaml.ScalarNode:
			a, err := runner.ParseArms(item.Value)
			if err != nil {
				return nil, at(item, "arms: %v", err)
			}
			arms = append(arms, a...)
		case yaml.MappingNode:
			var a runner.Arm
			for j := 0; j+1 < len(item.Content); j += 2 {
				k, val := item.Content[j], item.Content[j+1]
				if k.Value == "request" {
					req, err := yamlRequest(val, "arms: request")
					if err != nil {
						return nil, at(val, "%v", err)
					}
					a.Request = req
					continue
				}
				if val.Kind != yaml.ScalarNode {
					return nil, at(val, "arms: %s: want a value", k.Value)
				}
				switch strings.ReplaceAll(k.Value, "_", "-") {
				case "name":
					a.Name = val.Value
				case "policy":
					p, err := runner.ParseArms(val.Value)
					if err != nil {
						return nil, at(val, "arms: %v", err)
					}
					a.Policy = p[0].Policy
				case "max-rounds":
					n, err := strconv.Atoi(val.Value)
					if err != nil || n < 1 {
						return nil, at(val, "arms: max-rounds: want a whole number >= 1, got %q", val.Value)
					}
					a.MaxRounds = n
				case "tool-mode":
					a.ToolMode = val.Value
				default:
					ok, err := armSetting(&a, strings.ReplaceAll(k.Value, "_", "-"), val.Value)
					if !ok {
						return nil, at(k, "arms: unknown key %q (name, policy, max-rounds, tool-mode, context, degrade)", k.Value)
					}
					if err != nil {
						return nil, at(val, "arms: %s: %v", k.Value, err)
					}
				}
			}
			if a.Policy == "" {
				return nil, at(item, "arms: an arm needs a policy (single, multi or workflow)")
			}
			arms = append(arms, a)
		default:
			return nil, at(item, "arms: want a policy name or {name, policy, max-rounds, tool-mode}")
		}
	}
	return arms, nil
}

// envName is the environment variable of a rollout run flag: --num-repeats is ROLLOUT_NUM_REPEATS.
func envName(flagName string) string {
	return "ROLLOUT_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// applyEnv sets each flag of fs (but --config) whose ROLLOUT_ variable is set and not empty.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || f.Name == "config" {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = badUsage("$%s: %v", envName(f.Name), e)
			}
		}
	})
	return err
}
