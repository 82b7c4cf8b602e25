package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rollout-dev/rollout/pkg/rundir"
	"github.com/rollout-dev/rollout/pkg/servers/extraction"
	"github.com/rollout-dev/rollout/pkg/servers/workflow"
)

// generators are the task generators of the built-in servers.
var generators = map[string]struct {
	fn      func(w io.Writer, seed int64, n int) error
	defN    int
	summary string
}{
	"extraction": {extraction.Generate, 240, "multi-source extraction tasks for the extraction server (data/extraction.jsonl)"},
	"workflow":   {workflow.Generate, 60, "discovery → configuration → assembly tasks for the workflow server (data/workflow.jsonl)"},
}

func generatorNames() string {
	names := make([]string, 0, len(generators))
	for n := range generators {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// cmdGen writes a built-in server's task file, deterministically for a seed.
func cmdGen(_ context.Context, args []string, e env) error {
	about := "NAME is one of:"
	for _, name := range strings.Split(generatorNames(), ", ") {
		about += fmt.Sprintf("\n  %-11s %s (default --n %d)", name, generators[name].summary, generators[name].defN)
	}
	fs := newFlagSet("rollout gen", e, commandHelp{
		usage:    "rollout gen NAME [--seed N] [--n N] [--out FILE]",
		about:    about,
		examples: []string{"rollout gen extraction --seed 1 --out data/extraction.jsonl", "rollout gen workflow --n 10 | head -1"},
	})
	seed := fs.Int64("seed", 1, "generator seed: the same seed writes the same bytes")
	n := fs.Int("n", 0, "number of tasks (0: the generator's default)")
	out := fs.String("out", "-", "output `FILE` (- for stdout)")
	fs.StringVar(out, "o", "-", "short for --out")
	name, err := parseNamed(fs, args, e)
	if err != nil {
		return err
	}
	g, ok := generators[name]
	if !ok {
		return badUsage("gen: which generator? one of: %s", generatorNames())
	}
	if *n < 0 {
		return badUsage("gen: --n must be >= 0")
	}
	if *n == 0 {
		*n = g.defN
	}
	if *out == "-" {
		w := bufio.NewWriter(e.stdout)
		if err := g.fn(w, *seed, *n); err != nil {
			return err
		}
		return w.Flush()
	}
	if err := rundir.CheckOutput(rundir.Output{Flag: "--out", Path: *out}); err != nil {
		return badUsage("gen: %v", err)
	}
	// Written beside the target and renamed, so a failure never leaves half a file.
	tmp, err := os.CreateTemp(filepath.Dir(*out), filepath.Base(*out)+".*.tmp")
	if err != nil {
		return badUsage("gen: %v", err)
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriter(tmp)
	err = g.fn(w, *seed, *n)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = tmp.Close()
	} else {
		tmp.Close()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), *out)
	}
	if err != nil {
		return fmt.Errorf("gen: %s: %w", *out, err)
	}
	fmt.Fprintf(e.stderr, "rollout: wrote %d %s tasks (seed %d) to %s\n", *n, name, *seed, *out)
	return nil
}
