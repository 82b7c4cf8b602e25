package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
)

// cmdCompare compares two runs, or two arms of one run, rollout by rollout.
func cmdCompare(_ context.Context, args []string, e env) error {
	fs := newFlagSet("rollout compare", e, commandHelp{
		usage: "rollout compare RUN_A RUN_B [--arm NAME] [flags]\n       rollout compare RUN --arms A,B [flags]",
		about: `Pairs the rollouts of two sides by task and repeat and reports B − A: the mean reward
difference with its task-clustered std err and 95% CI (tasks resampled), the sides' means
over the pairs, tasks won / lost / tied, and each side's pass@k, terminations, rounds, tokens
and latency. Tasks are matched by the rows' id field, or the hash of a row without id, when
every record has one (any order of the task files), else by their index in the task file;
tasks on one side only, or with no repeat scored on both sides, are listed. A RUN is a run
directory or a .parquet file or journal, or the shard directories of one sharded run (a glob,
such as 'out/a/shard-*'). Sides that share no task exit 2, and sides whose common tasks have no
(task, repeat) scored on both exit 1: there is no difference to give.`,
		examples: []string{"rollout compare out/extraction --arms single,multi", "rollout compare out/qwen out/llama --format markdown"},
	})
	arms := fs.String("arms", "", "with one run: the two arms to compare, `A,B` (B − A is reported)")
	arm := fs.String("arm", "", "with two runs: compare this arm of each (needed when a run has several)")
	options := statsFlags(fs)
	paths, err := parsePaths(fs, args, e)
	if err != nil {
		return err
	}
	o, format, err := options()
	if err != nil {
		return err
	}
	runs, err := runArgs(paths)
	if err != nil {
		return badUsage("compare: %v", err)
	}
	load := func(r runArg) ([]record.Record, error) {
		var recs []record.Record
		if err := r.add(func(r *record.Record) { recs = append(recs, *r) }, e); err != nil {
			return nil, usageError{fmt.Errorf("compare: %w", err)}
		}
		return recs, nil
	}
	byArm := func(recs []record.Record, name string) []record.Record {
		var out []record.Record
		for _, r := range recs {
			if r.Arm == name {
				out = append(out, r)
			}
		}
		return out
	}
	armsOf := func(recs []record.Record) []string {
		set := map[string]bool{}
		for _, r := range recs {
			set[r.Arm] = true
		}
		var names []string
		for n := range set {
			names = append(names, n)
		}
		sort.Strings(names)
		return names
	}

	var a, b []record.Record
	var nameA, nameB string
	switch {
	case len(runs) == 1 && *arms != "":
		an, bn, ok := strings.Cut(*arms, ",")
		if !ok || an == "" || bn == "" || an == bn {
			return badUsage("compare: --arms wants two different arms, A,B")
		}
		recs, err := load(runs[0])
		if err != nil {
			return err
		}
		a, b = byArm(recs, an), byArm(recs, bn)
		for _, side := range []struct {
			name string
			recs []record.Record
		}{{an, a}, {bn, b}} {
			if len(side.recs) == 0 {
				return badUsage("compare: %s has no arm %q (its arms: %s)", runs[0].name, side.name, strings.Join(armsOf(recs), ", "))
			}
		}
		nameA, nameB = "arm="+an, "arm="+bn
	case len(runs) == 2 && *arms == "":
		for i, run := range runs {
			p := run.name
			recs, err := load(run)
			if err != nil {
				return err
			}
			names := armsOf(recs)
			switch {
			case *arm != "":
				recs = byArm(recs, *arm)
				if len(recs) == 0 {
					return badUsage("compare: %s has no arm %q (its arms: %s)", p, *arm, strings.Join(names, ", "))
				}
			case len(names) > 1:
				return badUsage("compare: %s holds several arms (%s): pick one with --arm, or compare them with --arms A,B", p, strings.Join(names, ", "))
			}
			if i == 0 {
				a, nameA = recs, p
			} else {
				b, nameB = recs, p
			}
		}
	default:
		return badUsage("compare: give two runs, or one run and --arms A,B")
	}
	c := report.Compare(a, b, nameA, nameB, o)
	if err := c.Write(e.stdout, format); err != nil {
		return err
	}
	return noPairs(c)
}

// noPairs is the error of a comparison over nothing: sides that share no task (exit 2: the
// wrong runs were given), or whose common tasks have no (task, repeat) scored on both sides
// (exit 1: every rollout of a side failed).
func noPairs(c *report.Comparison) error {
	if c.Pairs > 0 {
		return nil
	}
	a, b := c.Sides[0].Scope, c.Sides[1].Scope
	if c.Tasks == 0 && len(c.NoPairs) == 0 {
		return badUsage("compare: %s and %s share no task (%d tasks only in %s, %d only in %s, paired by %s): there is no difference to give; compare runs of the same task file",
			a, b, len(c.OnlyA), a, len(c.OnlyB), b, c.PairedBy)
	}
	return fmt.Errorf("compare: %s and %s have no (task, repeat) scored on both sides (%d common tasks without a pair): there is no difference to give", a, b, len(c.NoPairs))
}
