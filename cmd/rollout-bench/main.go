// Command rollout-bench is rollout's benchmark suite (`make bench`): the Go benchmarks of the
// hot paths, the simulator's HTTP ceiling, and load runs of the rollout binary against the
// simulator and a built-in resource server, each in its own process on loopback. It prints the
// figures as Markdown tables, writes them between the markers of BENCHMARKS.md, and keeps the
// raw results as JSON.
//
//	go build -o bin/rollout ./cmd/rollout
//	go run ./cmd/rollout-bench --bin bin/rollout [--scale 0.01] [--phases load,zero] [--md BENCHMARKS.md]
//
// `rollout-bench fleet` is the fleet benchmark (make bench-fleet): routes and concurrency of a
// pool against simulated inference servers, in this process (see fleet.go).
//
//	go run ./cmd/rollout-bench fleet -limit 40 -repeats 8 -speed 2 -max-num-seqs 16
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/rollout-dev/rollout/bench/loadbench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "fleet" {
		return runFleet(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("rollout-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bin := fs.String("bin", "bin/rollout", "the rollout `BINARY` to load")
	dir := fs.String("dir", "out/bench", "work `DIR`: per-scenario outputs, profiles, results.json")
	md := fs.String("md", "", "write the figures between the markers of this Markdown `FILE` (e.g. BENCHMARKS.md)")
	scale := fs.Float64("scale", 1, "multiply every load scenario's task count (1: the full suite with 10^6 tasks; 0.01: a quick look)")
	phases := fs.String("phases", "", "comma-separated phases (default all): gobench, ceiling, floor, load, zero, rounds, size, concurrency, inflight, million")
	benchtime := fs.String("benchtime", "", "go test -benchtime for the Go benchmarks")
	profile := fs.Bool("profile", false, "write each process's CPU profile (runner.pprof, sim.pprof, server.pprof) into its scenario's directory")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if _, err := os.Stat(*bin); err != nil {
		fmt.Fprintf(stderr, "rollout-bench: --bin: %v (build it: go build -o bin/rollout ./cmd/rollout)\n", err)
		return 2
	}
	abs, _ := filepath.Abs(*bin)
	opt := loadbench.SuiteOptions{Scale: *scale, BenchTime: *benchtime}
	if *phases != "" {
		known := map[string]bool{"gobench": true, "ceiling": true, "floor": true, "load": true, "zero": true, "rounds": true, "size": true, "concurrency": true, "million": true, "inflight": true}
		for _, p := range strings.Split(*phases, ",") {
			if !known[p] {
				fmt.Fprintf(stderr, "rollout-bench: --phases: unknown phase %q\n", p)
				return 2
			}
			opt.Phases = append(opt.Phases, p)
		}
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "rollout-bench: %v\n", err)
		return 1
	}
	suite, err := loadbench.RunSuite(ctx, loadbench.Config{Bin: abs, Dir: *dir, Profile: *profile}, opt, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "rollout-bench: %v\n", err)
		if ctx.Err() != nil {
			return 130
		}
		return 1
	}
	var gen strings.Builder
	suite.Markdown(&gen)
	fmt.Fprint(stdout, gen.String())
	if b, err := json.MarshalIndent(suite, "", "  "); err == nil {
		os.WriteFile(filepath.Join(*dir, "results.json"), b, 0o644)
	}
	if *md != "" {
		if err := loadbench.UpdateFile(*md, []byte(gen.String())); err != nil {
			fmt.Fprintf(stderr, "rollout-bench: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "rollout-bench: wrote %s\n", *md)
	}
	for _, t := range suite.Targets() {
		if t.Missing == "" && !t.Met {
			fmt.Fprintf(stderr, "rollout-bench: target not met: %s: %s (limit %s)\n", t.Name, t.Measured, t.Limit)
		}
	}
	return 0
}
