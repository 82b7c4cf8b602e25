// Command fleetbench runs the fleet benchmark (make bench-fleet): the extraction tasks against
// simulated inference servers, every routing policy at fixed concurrencies and auto, and prints
// a Markdown table.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rollout-dev/rollout/bench/fleetbench"
	"github.com/rollout-dev/rollout/pkg/fleet"
	"github.com/rollout-dev/rollout/pkg/sim/serving"
)

// speedSet says whether -speed was given.
func speedSet() bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "speed" })
	return set
}

func main() {
	tasks := flag.String("tasks", "data/extraction.jsonl", "the extraction task `FILE`")
	limit := flag.Int("limit", 40, "tasks `N`")
	repeats := flag.Int("repeats", 8, "repeats `N` per task")
	replicas := flag.Int("replicas", 4, "simulated servers `N`")
	concs := flag.String("concurrency", "32,128,512", "fixed concurrencies `LIST`")
	routes := flag.String("routes", "affinity,least-outstanding,round-robin", "routes `LIST`")
	every := flag.Duration("trace", 0, "print every `INTERVAL` the endpoints' requests in flight and limits to stderr")
	cfg := serving.Default
	flag.IntVar(&cfg.MaxNumSeqs, "max-num-seqs", 16, "sequences `N` per replica's batch")
	flag.Float64Var(&cfg.Speed, "speed", 2, "model time runs `X` times faster than the clock")
	flag.IntVar(&cfg.KVCacheTokens, "kv-cache-tokens", cfg.KVCacheTokens, "prefix-cache `TOKENS` per replica (with -cache slots: the host prompt cache)")
	cache := flag.String("cache", "blocks", "the replicas' cache `MODEL`: blocks (vLLM's shared prefix blocks) or slots (llama-server's slots)")
	flag.Float64Var(&cfg.SlotSimilarity, "slot-similarity", 0.1, "with -cache slots: the prompt share `F` a slot's prefix must exceed to be chosen by it")
	costs := flag.String("costs", "h100", "the replicas' step `COSTS`: h100 (an 8B model on a GPU, vLLM) or tiny-cpu (the interop suite's tiny agent on llama-server, one CPU thread, at -speed 4 unless set)")
	notes := flag.Int("notes", 0, "append a note of `WORDS` words of its own world to each task's question (the long-context workload)")
	flag.Parse()
	switch *cache {
	case "blocks":
	case "slots":
		cfg.Slots = true
	default:
		fmt.Fprintf(os.Stderr, "-cache %s: want blocks or slots\n", *cache)
		os.Exit(2)
	}
	switch *costs {
	case "h100":
	case "tiny-cpu":
		cfg.PrefillPerToken, cfg.DecodeBase, cfg.DecodePerSeq = serving.TinyCPU.PrefillPerToken, serving.TinyCPU.DecodeBase, serving.TinyCPU.DecodePerSeq
		if !speedSet() {
			cfg.Speed = serving.TinyCPU.Speed
		}
	default:
		fmt.Fprintf(os.Stderr, "-costs %s: want h100 or tiny-cpu\n", *costs)
		os.Exit(2)
	}
	if *notes > 0 {
		dir, err := os.MkdirTemp("", "fleetbench-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer os.RemoveAll(dir)
		long := filepath.Join(dir, "tasks.jsonl")
		if err := fleetbench.WriteTasks(long, *tasks, *limit, *notes); err != nil {
			fmt.Fprintln(os.Stderr, "-notes:", err)
			os.Exit(2)
		}
		*tasks = long
	}
	var results []fleetbench.Result
	for _, r := range strings.Split(*routes, ",") {
		route, err := fleet.ParseRoute(r)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		var cases []fleetbench.Case
		maxConc := 0
		for _, c := range strings.Split(*concs, ",") {
			n, err := strconv.Atoi(c)
			if err != nil {
				fmt.Fprintln(os.Stderr, "-concurrency:", err)
				os.Exit(2)
			}
			maxConc = max(maxConc, n)
			cases = append(cases, fleetbench.Case{Concurrency: n})
		}
		cases = append(cases, fleetbench.Case{Concurrency: maxConc, Auto: true})
		for _, c := range cases {
			c.Tasks, c.Limit, c.Repeats, c.Replicas, c.Route, c.Serving, c.Every = *tasks, *limit, *repeats, *replicas, route, cfg, *every
			res, err := fleetbench.Run(context.Background(), c)
			if err != nil {
				fmt.Fprintln(os.Stderr, "fleetbench:", err)
				os.Exit(1)
			}
			fmt.Fprintf(os.Stderr, "fleetbench: %s concurrency %d auto %v: %.1f rollouts/s\n", route, c.Concurrency, c.Auto, res.RolloutsPerSec)
			fleetbench.WriteTrace(os.Stderr, res)
			results = append(results, res)
		}
	}
	fmt.Printf("%d tasks x %d repeats, %d simulated servers (max-num-seqs %d, speed %g, %s cache)\n\n", *limit, *repeats, *replicas, cfg.MaxNumSeqs, cfg.Speed, *cache)
	fleetbench.WriteMarkdown(os.Stdout, results)
}
