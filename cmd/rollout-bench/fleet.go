package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rollout-dev/rollout/bench/fleetbench"
	"github.com/rollout-dev/rollout/pkg/fleet"
	"github.com/rollout-dev/rollout/pkg/sim/serving"
)

// runFleet is `rollout-bench fleet` (make bench-fleet): the extraction tasks against simulated
// inference servers, every routing policy at fixed concurrencies and auto; it prints a Markdown
// table to stdout and each case's rate (and with -trace the endpoints' state) to stderr.
func runFleet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rollout-bench fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tasks := fs.String("tasks", "data/extraction.jsonl", "the extraction task `FILE`")
	limit := fs.Int("limit", 40, "tasks `N`")
	repeats := fs.Int("repeats", 8, "repeats `N` per task")
	replicas := fs.Int("replicas", 4, "simulated servers `N`")
	concs := fs.String("concurrency", "32,128,512", "fixed concurrencies `LIST`")
	routes := fs.String("routes", "affinity,least-outstanding,round-robin", "routes `LIST`")
	every := fs.Duration("trace", 0, "print every `INTERVAL` the endpoints' requests in flight and limits to stderr")
	cfg := serving.Default
	fs.IntVar(&cfg.MaxNumSeqs, "max-num-seqs", 16, "sequences `N` per replica's batch")
	fs.Float64Var(&cfg.Speed, "speed", 2, "model time runs `X` times faster than the clock")
	fs.IntVar(&cfg.KVCacheTokens, "kv-cache-tokens", cfg.KVCacheTokens, "prefix-cache `TOKENS` per replica (with -cache slots: the host prompt cache)")
	cache := fs.String("cache", "blocks", "the replicas' cache `MODEL`: blocks (vLLM's shared prefix blocks) or slots (llama-server's slots)")
	fs.Float64Var(&cfg.SlotSimilarity, "slot-similarity", 0.1, "with -cache slots: the prompt share `F` a slot's prefix must exceed to be chosen by it")
	costs := fs.String("costs", "h100", "the replicas' step `COSTS`: h100 (an 8B model on a GPU, vLLM) or tiny-cpu (the interop suite's tiny agent on llama-server, one CPU thread, at -speed 4 unless set)")
	notes := fs.Int("notes", 0, "append a note of `WORDS` words of its own world to each task's question (the long-context workload)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	speedSet := false
	fs.Visit(func(f *flag.Flag) { speedSet = speedSet || f.Name == "speed" })
	switch *cache {
	case "blocks":
	case "slots":
		cfg.Slots = true
	default:
		fmt.Fprintf(stderr, "rollout-bench fleet: -cache %s: want blocks or slots\n", *cache)
		return 2
	}
	switch *costs {
	case "h100":
	case "tiny-cpu":
		cfg.PrefillPerToken, cfg.DecodeBase, cfg.DecodePerSeq = serving.TinyCPU.PrefillPerToken, serving.TinyCPU.DecodeBase, serving.TinyCPU.DecodePerSeq
		if !speedSet {
			cfg.Speed = serving.TinyCPU.Speed
		}
	default:
		fmt.Fprintf(stderr, "rollout-bench fleet: -costs %s: want h100 or tiny-cpu\n", *costs)
		return 2
	}
	if *notes > 0 {
		dir, err := os.MkdirTemp("", "fleetbench-")
		if err != nil {
			fmt.Fprintln(stderr, "rollout-bench fleet:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		long := filepath.Join(dir, "tasks.jsonl")
		if err := fleetbench.WriteTasks(long, *tasks, *limit, *notes); err != nil {
			fmt.Fprintln(stderr, "rollout-bench fleet: -notes:", err)
			return 2
		}
		*tasks = long
	}
	var results []fleetbench.Result
	for _, r := range strings.Split(*routes, ",") {
		route, err := fleet.ParseRoute(r)
		if err != nil {
			fmt.Fprintln(stderr, "rollout-bench fleet:", err)
			return 2
		}
		var cases []fleetbench.Case
		maxConc := 0
		for _, c := range strings.Split(*concs, ",") {
			n, err := strconv.Atoi(c)
			if err != nil {
				fmt.Fprintln(stderr, "rollout-bench fleet: -concurrency:", err)
				return 2
			}
			maxConc = max(maxConc, n)
			cases = append(cases, fleetbench.Case{Concurrency: n})
		}
		cases = append(cases, fleetbench.Case{Concurrency: maxConc, Auto: true})
		for _, c := range cases {
			c.Tasks, c.Limit, c.Repeats, c.Replicas, c.Route, c.Serving, c.Every = *tasks, *limit, *repeats, *replicas, route, cfg, *every
			res, err := fleetbench.Run(ctx, c)
			if err != nil {
				fmt.Fprintln(stderr, "rollout-bench fleet:", err)
				if ctx.Err() != nil {
					return 130
				}
				return 1
			}
			fmt.Fprintf(stderr, "rollout-bench fleet: %s concurrency %d auto %v: %.1f rollouts/s\n", route, c.Concurrency, c.Auto, res.RolloutsPerSec)
			fleetbench.WriteTrace(stderr, res)
			results = append(results, res)
		}
	}
	fmt.Fprintf(stdout, "%d tasks x %d repeats, %d simulated servers (max-num-seqs %d, speed %g, %s cache)\n\n", *limit, *repeats, *replicas, cfg.MaxNumSeqs, cfg.Speed, *cache)
	fleetbench.WriteMarkdown(stdout, results)
	return 0
}
