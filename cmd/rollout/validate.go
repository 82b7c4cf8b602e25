package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/servers"
	"github.com/rollout-dev/rollout/pkg/servers/store"
	"github.com/rollout-dev/rollout/pkg/validate"
)

// errCheckFailed: a check found problems; they are printed.
var errCheckFailed = errors.New("check failed")

// cmdValidate lints task files and, with --oracle, proves their reference plans.
func cmdValidate(ctx context.Context, args []string, e env) error {
	fs := newFlagSet("rollout validate", e, commandHelp{
		usage: "rollout validate FILE... [--oracle [--server URL|NAME=URL|builtin:NAME]...]",
		about: `Lints task files: rows, tools' JSON Schemas, duplicate ids, reference plans. Problems go to
stdout as FILE:LINE: FIELD: message; the exit status is 3 when there is any.`,
		examples: []string{"rollout validate data/extraction.jsonl", "rollout validate data/workflow.jsonl --oracle --server builtin:workflow"},
	})
	oracle := fs.Bool("oracle", false, "also play every task's reference_plan through the simulator against its server: it must score 1, and less than 1 without each required call")
	var specs serverFlags
	fs.Var(&specs, "server", "resource server for --oracle, as in run: `URL`, NAME=URL or builtin:NAME (default: builtin:NAME for each agent_ref.name of the file that names a built-in server)")
	concurrency := fs.Int("concurrency", 32, "rollouts in flight for --oracle")
	timeout := fs.Duration("rollout-timeout", time.Minute, "deadline of one --oracle rollout")
	// Files may come before the flags.
	var files []string
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		files, args = append(files, args[0]), args[1:]
	}
	if err := parseFlags(fs, args, e); err != nil {
		return err
	}
	files = append(files, fs.Args()...)
	if len(files) == 0 {
		return badUsage("validate: which task file(s)?")
	}
	if len(specs) > 0 && !*oracle {
		return badUsage("validate: --server is for --oracle")
	}

	failed := false
	for _, path := range files {
		rep, err := validate.Lint(path)
		if err != nil {
			return badUsage("validate: %v", err)
		}
		for _, p := range rep.Problems {
			fmt.Fprintln(e.stdout, p)
		}
		fmt.Fprintf(e.stderr, "rollout: %s: %d tasks, %d with a reference plan: %d problems\n", rep.File, rep.Tasks, rep.Plans, len(rep.Problems))
		if rep.Errors() > 0 {
			failed = true
			continue // the oracle needs well-formed rows
		}
		if !*oracle {
			continue
		}
		use := specs
		if len(use) == 0 {
			if use, err = defaultOracleServers(path); err != nil {
				return err
			}
		}
		transport, err := newTransport(e, *concurrency)
		if err != nil {
			return err
		}
		routes, stops, err := buildServers(ctx, use, serverSetup{store: "memory", ttl: store.DefaultTTL, toolTimeout: *timeout, transport: transport, policy: retry.DefaultPolicy})
		if err != nil {
			runAll(stops)
			return err
		}
		start := time.Now()
		orep, err := validate.Oracle(ctx, path, validate.OracleOptions{Servers: routes, Concurrency: *concurrency, RolloutTimeout: *timeout, Transport: transport})
		runAll(stops)
		if err != nil {
			if ctx.Err() != nil {
				return errInterrupted
			}
			return fmt.Errorf("validate --oracle: %s: %w", path, err)
		}
		for _, p := range orep.Problems {
			fmt.Fprintln(e.stdout, p)
		}
		fmt.Fprintf(e.stderr, "rollout: %s: oracle: %d tasks, %d rollouts in %s: %d problems\n", path, orep.Tasks, orep.Rollouts, time.Since(start).Round(time.Millisecond), len(orep.Problems))
		if len(orep.Problems) > 0 {
			failed = true
		}
	}
	if failed {
		return errCheckFailed
	}
	return nil
}

// defaultOracleServers is builtin:NAME for every agent_ref.name in the file that is a built-in
// server, and for a file whose rows name none, an error asking for --server.
func defaultOracleServers(path string) ([]string, error) {
	names := map[string]bool{}
	unnamed := false
	err := dataset.ReadFile(path, func(t *dataset.Task) error {
		if t.AgentRef == nil || t.AgentRef.Name == "" {
			unnamed = true
		} else {
			names[t.AgentRef.Name] = true
		}
		return nil
	})
	if err != nil {
		return nil, badUsage("validate: %v", err)
	}
	var specs []string
	for n := range names {
		if !slices.Contains(servers.Names(), n) {
			return nil, badUsage("validate --oracle: %s: rows name server %q, which is not built in: give --server %s=URL", path, n, n)
		}
		specs = append(specs, n+"=builtin:"+n)
	}
	if unnamed {
		return nil, badUsage("validate --oracle: %s: rows without agent_ref.name: give --server URL or --server builtin:NAME", path)
	}
	sort.Strings(specs)
	return specs, nil
}

func runAll(fns []func()) {
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}
