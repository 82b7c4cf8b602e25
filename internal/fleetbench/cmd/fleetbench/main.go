// Command fleetbench runs the fleet benchmark (make bench-fleet): the extraction tasks against
// simulated inference servers, every routing policy at fixed concurrencies and auto, and prints
// a Markdown table.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/rollout-dev/rollout/internal/fleetbench"
	"github.com/rollout-dev/rollout/pkg/fleet"
	"github.com/rollout-dev/rollout/pkg/sim/serving"
)

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
	flag.IntVar(&cfg.KVCacheTokens, "kv-cache-tokens", cfg.KVCacheTokens, "prefix-cache `TOKENS` per replica")
	flag.Parse()
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
	fmt.Printf("%d tasks x %d repeats, %d simulated servers (max-num-seqs %d, speed %g)\n\n", *limit, *repeats, *replicas, cfg.MaxNumSeqs, cfg.Speed)
	fleetbench.WriteMarkdown(os.Stdout, results)
}
