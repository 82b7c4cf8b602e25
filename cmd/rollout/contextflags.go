package main

import (
	"flag"
	"os"
	"strconv"
	"strings"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/runner"
)

// contextFlags are rollout run's context flags: the strategies (--context), the briefing
// prompt (--briefing-prompt) and --degrade.
type contextFlags struct {
	context        string
	briefingPrompt string
	degrade        bool
}

// define adds the flags to fs.
func (c *contextFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&c.context, "context", "", "`CTX` sent each round: full, window:N, budget:TOKENS, briefing, or a list")
	fs.StringVar(&c.briefingPrompt, "briefing-prompt", "", "the briefing strategy's request, from `FILE` (default: docs/context.md's)")
	fs.BoolVar(&c.degrade, "degrade", false, "after --max-failed-rounds failed rounds, ask for an answer without tools")
}

// apply sets opts' context settings: the briefing prompt and --degrade for every arm; one
// --context strategy for every arm, or, with a list, every arm once per strategy, named by the
// strategy (ARM/STRATEGY with several arms).
func (c *contextFlags) apply(opts *runner.Options, defaultArm string) error {
	opts.Agent.Degrade = c.degrade
	if c.briefingPrompt != "" {
		b, err := os.ReadFile(c.briefingPrompt)
		if err != nil {
			return badUsage("--briefing-prompt: %v", err)
		}
		if strings.TrimSpace(string(b)) == "" {
			return badUsage("--briefing-prompt %s: the file is empty", c.briefingPrompt)
		}
		opts.Agent.BriefingPrompt = string(b)
	}
	if c.context == "" {
		return nil
	}
	var strategies []agent.ContextStrategy
	for _, s := range strings.Split(c.context, ",") {
		st, err := agent.ParseContext(s)
		if err != nil {
			return badUsage("--context: %v", err)
		}
		strategies = append(strategies, st)
	}
	if len(strategies) == 1 {
		opts.Agent.Context = strategies[0]
		return nil
	}
	arms := opts.Arms
	if len(arms) == 0 {
		arms = []runner.Arm{{Name: defaultArm, Policy: agent.PolicyMulti}}
	}
	if given := armContexts(arms); given != "" {
		// The arms (of --config, or of the run resumed) have their contexts already: the
		// list's arms, as a resume with the run's own command line gives them again, are
		// kept; others are refused.
		names := make([]string, len(strategies))
		for i, st := range strategies {
			names[i] = st.String()
		}
		if given == strings.Join(names, ",") {
			return nil
		}
		return badUsage("--context %s: the arms already have their own contexts (%s): give --context or the arms' contexts, not both", c.context, given)
	}
	var out []runner.Arm
	for _, a := range arms {
		for _, st := range strategies {
			b := a
			b.Context = st
			b.Name = st.String()
			if len(arms) > 1 {
				b.Name = a.Name + "/" + st.String()
				if a.Name == "" {
					b.Name = a.Policy + "/" + st.String()
				}
			}
			out = append(out, b)
		}
	}
	opts.Arms = out
	return nil
}

// armContexts is the arms' contexts as --context lists them, "" when an arm has none.
func armContexts(arms []runner.Arm) string {
	var list []string
	for _, a := range arms {
		if a.Context.Kind == "" {
			return ""
		}
		list = append(list, a.Context.String())
	}
	return strings.Join(list, ",")
}

// armSettings are an arm's context settings as the manifest names them (",context=S",
// ",degrade=true"): see newRunConfig and parseArmName.
func armSettings(a runner.Arm) string {
	s := ""
	if a.Context.Kind != "" {
		s += ",context=" + a.Context.String()
	}
	if a.Degrade != nil {
		s += ",degrade=" + strconv.FormatBool(*a.Degrade)
	}
	if len(a.Request) > 0 {
		s += ",request=" + string(a.Request) // last: parseArmName takes the rest of the name
	}
	return s
}

// armSetting reads one of armSettings' settings into a; ok is false for another key.
func armSetting(a *runner.Arm, key, value string) (ok bool, err error) {
	switch key {
	case "context":
		a.Context, err = agent.ParseContext(value)
		return true, err
	case "degrade":
		d, err := strconv.ParseBool(value)
		a.Degrade = &d
		return true, err
	}
	return false, nil
}
