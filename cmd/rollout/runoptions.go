package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/plan"
	"github.com/rollout-dev/rollout/pkg/runner"
)

// runOptions are the runner's options of a run with flags f, against the model ep and the
// resource servers routes; configArms and resumeSteps are the arms and the workflow steps of
// --config or of the run resumed. Warnings about the input go to stderr.
func runOptions(f runFlags, ep *modelEndpoint, routes runner.Servers, configArms []runner.Arm, resumeSteps *agent.Workflow, stderr io.Writer) (opts runner.Options, err error) {
	opts = runner.Options{
		Input: f.input, Limit: f.limit, IDs: f.ids, Repeats: f.repeats, Concurrency: f.concurrency, Strict: f.strict,
		RolloutTimeout: f.rolloutTimeout, DrainTimeout: f.drainTimeout, Arm: f.arm, Seed: f.seed, Servers: routes, RetryBudget: f.retryBudget,
		Shard: f.shard,
		Agent: agent.Config{Model: ep.model, ModelName: ep.name, MaxRounds: f.maxRounds, MaxFailedRounds: f.maxFailedRounds,
			MaxTokens: f.maxTokens, ToolMode: f.toolMode, MaxToolCalls: f.maxToolCalls, MaxToolBytes: f.maxToolBytes},
	}
	if f.fleet.auto && ep.pool != nil {
		opts.Window = ep.pool.Window(f.concurrency) // the rollouts in flight follow the adaptive limits
	}
	if f.captureTokens {
		opts.Agent.CaptureTokens = &agent.TokenCapture{OnNoTokens: noTokensWarning(stderr)} // capture.go
	}
	if f.temperature >= 0 {
		t := f.temperature
		opts.Agent.Temperature = &t
	}
	if opts.Agent.Request, err = f.request.build(); err != nil {
		return opts, err
	}
	if f.steps != "" {
		wf, err := agent.LoadWorkflow(f.steps)
		if err != nil {
			return opts, badUsage("--steps: %v", err)
		}
		opts.Agent.Workflow = wf
	} else if resumeSteps != nil {
		opts.Agent.Workflow = resumeSteps
	}
	opts.Arms = configArms
	if f.arms != "" {
		if f.arm != runner.DefaultArm {
			return opts, badUsage("run: --arm names the one arm of a run; with --arms the arms are named by their policies")
		}
		arms, err := runner.ParseArms(f.arms)
		if err != nil {
			return opts, badUsage("--arms: %v", err)
		}
		opts.Arms = arms
	}
	if err := f.ctx.apply(&opts, f.arm); err != nil {
		return opts, err
	}
	jsonWarned := false
	for _, a := range opts.Arms {
		if a.Policy == agent.PolicyWorkflow && opts.Agent.Workflow == nil {
			return opts, badUsage("the workflow arm needs --steps FILE (e.g. data/workflow.steps.json)")
		}
		if ep.sim != nil && cmp.Or(a.ToolMode, f.toolMode) == agent.ToolModeJSON && !jsonWarned {
			jsonWarned = true
			fmt.Fprintf(stderr, "rollout: warning: tool-mode json (arm %s): the simulator answers with native tool calls only, so those rollouts end as invalid_output\n", a.Name)
		}
	}
	if ep.sim != nil && len(opts.Arms) == 0 && f.toolMode == agent.ToolModeJSON {
		fmt.Fprintf(stderr, "rollout: warning: --tool-mode json: the simulator answers with native tool calls only, so the rollouts end as invalid_output\n")
	}
	if err := opts.Validate(); err != nil {
		return opts, usageError{err}
	}
	if err := runner.CheckInput(&opts); err != nil {
		return opts, usageError{err}
	}
	if f.input != "-" {
		warns, err := toolWarnings(f.input, f.limit)
		if err != nil {
			return opts, badUsage("--input %s: %v", f.input, err)
		}
		for i, w := range warns {
			if i == 5 {
				fmt.Fprintf(stderr, "rollout: ... and %d more rows without tools\n", len(warns)-5)
				break
			}
			fmt.Fprintf(stderr, "rollout: %s\n", w)
		}
	}
	return opts, nil
}

// toolWarnLimit bounds the rows toolWarnings reads, so that a huge input does not pay a second
// pass over it before the run starts.
const toolWarnLimit = 10000

// toolWarnings names the rows (among the first toolWarnLimit, or limit when smaller) that offer
// the model no tools while their reference_plan calls some: the model cannot make those calls.
func toolWarnings(path string, limit int) ([]string, error) {
	rd, err := dataset.Open(path)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	if limit <= 0 || limit > toolWarnLimit {
		limit = toolWarnLimit
	}
	var warns []string
	err = dataset.Each(rd, dataset.Options{Limit: limit}, func(t *dataset.Task, _ int) error {
		if t.Err != nil || t.Params == nil || len(t.Params.Tools) > 0 {
			return nil
		}
		for _, fl := range t.Fields {
			if fl.Key != plan.Field {
				continue
			}
			p, err := plan.Parse(fl.Value)
			if err != nil {
				return nil // the run reports a bad plan where it matters
			}
			var names []string
			for _, round := range p.Rounds {
				for _, c := range round {
					if !slices.Contains(names, c.Name) {
						names = append(names, c.Name)
					}
				}
			}
			warns = append(warns, fmt.Sprintf("%s:%d: warning: the row offers no tools (responses_create_params.tools) but its reference_plan calls %s: the model cannot make those calls",
				t.File, t.Line, listSome(names, 3)))
		}
		return nil
	})
	return warns, err
}
