package interop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/bench/fleetbench"
	"github.com/rollout-dev/rollout/pkg/fleet"
	"github.com/rollout-dev/rollout/pkg/sim/serving"
)

// Routing a fleet against real prefix caches: three llama-server replicas of the tiny agent,
// each with its own slots, behind rollout's endpoint pool (several --model-url, --route), and
// the cache counted by the servers themselves (/metrics: prompt tokens processed and prompt
// tokens taken from a cache). `make interop` runs one case per route on the short workload and
// checks that the records' usage is what the servers counted; `make bench-fleet-real`
// (ROLLOUT_FLEET_REAL=1) runs the grid of routes x slots x concurrency on the short and the
// long workload and writes the table (docs/tiny-agent.md reads it).

// fleetCase is one run of the fleet.
type fleetCase struct {
	workload string // "short": the held-out extraction tasks; "long": the same with a long unique note each
	route    string
	slots    int  // per server
	conc     int  // rollouts in flight
	noRAM    bool // --cache-ram 0: no host-memory prompt cache, only what the slots hold
}

func (c fleetCase) String() string {
	ram := ""
	if c.noRAM {
		ram = "/cache-ram-0"
	}
	return fmt.Sprintf("%s/%s/slots-%d/conc-%d%s", c.workload, c.route, c.slots, c.conc, ram)
}

// fleetResult is what the servers counted in a case.
type fleetResult struct {
	fleetCase
	rollouts, requests  int
	prompt, cached      int // prompt tokens of all requests, and those taken from a cache
	perServer           []int
	meanReward, rounds  float64
	sharedPrefix        int     // tokens every task's first prompt shares
	stay                float64 // share of model calls sent where the rollout's previous call went (fleetbench.Stay)
	recordsMatchServers bool
}

func (r fleetResult) hitRate() float64 { return float64(r.cached) / float64(r.prompt) }

const fleetReplicas = 3

// fleetTasks writes the first n held-out extraction rows; for the long workload each row's
// question gets a note of words words that is the task's own (fleetbench.WriteTasks).
func fleetTasks(t *testing.T, n, words int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	if err := fleetbench.WriteTasks(path, "../../data/extraction.jsonl", n, words); err != nil {
		t.Fatal(err)
	}
	return path
}

// runFleet serves the tiny agent on three replicas and runs tasks (arm multi, greedy) through
// the pool under c.
func (s suite) runFleet(t *testing.T, tasks string, n int, c fleetCase) fleetResult {
	t.Helper()
	extra := []string{}
	if c.noRAM {
		extra = append(extra, "--cache-ram", "0")
	}
	args := []string{"--input", tasks, "--arms", "multi", "--temperature", "0", "--max-tokens", "256", "--seed", "1",
		"--concurrency", strconv.Itoa(c.conc), "--route", c.route, "--model", "tiny-agent", "--server", "builtin:extraction",
		"--fail-on-error", "1"} // a model error is data here; the servers' counters are what is measured
	if c.workload == "long" {
		// The tiny agent, trained on short prompts, calls tools with wrong arguments after a
		// long note: its rollouts go on for up to 6 rounds anyway (failed tool calls are tool
		// results in its context), so that the servers see long conversations grow.
		args = append(args, "--max-failed-rounds", "6", "--max-rounds", "6")
	}
	var servers []*server
	for range fleetReplicas {
		srv := s.start(t, tinyAgent(t), append(tinyArgs(c.slots), extra...)...)
		servers = append(servers, srv)
		args = append(args, "--model-url", srv.url())
	}
	res := fleetResult{fleetCase: c, sharedPrefix: servers[0].sharedPrefix(t, tasks)}
	out, _ := s.run(t, args...)
	recPrompt, recCached := map[string]int{}, map[string]int{}
	var reward float64
	var endpoints [][]string
	for _, r := range records(t, out) {
		res.rollouts++
		var eps []string
		for _, rd := range r.Trajectory.Rounds {
			eps = append(eps, rd.Endpoint)
			res.requests++
			recPrompt[rd.Endpoint] += rd.Usage.PromptTokens
			recCached[rd.Endpoint] += rd.Usage.CachedTokens
		}
		res.rounds += float64(len(r.Trajectory.Rounds))
		endpoints = append(endpoints, eps)
	}
	res.stay = fleetbench.Stay(endpoints)
	failed := 0
	for _, r := range readJSONL[journalRecord](t, out+"/journal.jsonl") {
		reward += r.Reward
		if r.FailureClass != "" {
			failed++
		}
	}
	if res.rollouts != n {
		t.Fatalf("%s: %d records, want %d", c, res.rollouts, n)
	}
	res.meanReward, res.rounds = reward/float64(n), res.rounds/float64(n)
	res.recordsMatchServers = true
	for _, srv := range servers {
		host := strings.TrimPrefix(srv.base, "http://") // the pool names an endpoint by its host
		m := srv.metrics(t)
		processed, cached := int(m["prompt_tokens_total"]), int(m["prompt_tokens_cached_total"])
		res.prompt += processed + cached
		res.cached += cached
		res.perServer = append(res.perServer, processed+cached)
		// A call the server answered 500 (its tool-call parser refused what the model wrote)
		// has no usage in the record, but the server counted its prompt.
		if failed == 0 && (recPrompt[host] != processed+cached || recCached[host] != cached) {
			res.recordsMatchServers = false
			t.Errorf("%s: %s counted %d prompt tokens (%d cached), the records %d (%d cached); records by endpoint: %v",
				c, host, processed+cached, cached, recPrompt[host], recCached[host], recPrompt)
		}
	}
	return res
}

// sharedPrefix is how many tokens the first prompts of the task file's rows (system, tools and
// question, through the server's own chat template and tokenizer) have in common.
func (s *server) sharedPrefix(t *testing.T, tasks string) int {
	t.Helper()
	data, err := os.ReadFile(tasks)
	if err != nil {
		t.Fatal(err)
	}
	var prev []int
	shared := -1
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var row struct {
			Params struct {
				Instructions string `json:"instructions"`
				Input        []struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"input"`
				Tools []struct {
					Name        string          `json:"name"`
					Description string          `json:"description"`
					Parameters  json.RawMessage `json:"parameters"`
				} `json:"tools"`
			} `json:"responses_create_params"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		msgs := []map[string]string{{"role": "system", "content": row.Params.Instructions}}
		for _, m := range row.Params.Input {
			msgs = append(msgs, map[string]string{"role": m.Role, "content": m.Content})
		}
		var tools []map[string]any
		for _, tl := range row.Params.Tools {
			tools = append(tools, map[string]any{"type": "function", "function": map[string]any{"name": tl.Name, "description": tl.Description, "parameters": tl.Parameters}})
		}
		var tmpl struct{ Prompt string }
		s.postJSON(t, "/apply-template", map[string]any{"messages": msgs, "tools": tools}, &tmpl)
		var tok struct{ Tokens []int }
		s.postJSON(t, "/tokenize", map[string]any{"content": tmpl.Prompt, "add_special": false, "parse_special": true}, &tok)
		if prev != nil {
			n := 0
			for n < len(prev) && n < len(tok.Tokens) && prev[n] == tok.Tokens[n] {
				n++
			}
			if shared < 0 || n < shared {
				shared = n
			}
		}
		prev = tok.Tokens
	}
	return shared
}

func (s *server) postJSON(t *testing.T, path string, body, into any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(s.base+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(data, into) != nil {
		t.Fatalf("POST %s: HTTP %d: %s", path, resp.StatusCode, data)
	}
}

// One case per route, 12 held-out tasks at concurrency 6 on 3 x 2 slots: every request's
// usage in the records is what its server counted (processed + cached), per server; the caches
// serve most prompt tokens on every route (the shared system-and-tools prefix), and never more
// than the prompts had.
func TestFleetRoutingRealCaches(t *testing.T) {
	s := env(t)
	const n = 12
	tasks := fleetTasks(t, n, 0)
	for _, route := range []string{"affinity", "round-robin", "least-outstanding"} {
		t.Run(route, func(t *testing.T) {
			r := s.runFleet(t, tasks, n, fleetCase{workload: "short", route: route, slots: 2, conc: 6})
			if r.cached <= 0 || r.cached >= r.prompt || r.sharedPrefix <= 0 || r.cached < r.sharedPrefix*(r.requests-fleetReplicas*2) {
				t.Fatalf("%s: %d of %d prompt tokens cached in %d requests; shared prefix %d tokens", r.fleetCase, r.cached, r.prompt, r.requests, r.sharedPrefix)
			}
			t.Logf("%s: %d requests, %d prompt tokens, %.1f%% from the caches (shared prefix %d tokens)", r.fleetCase, r.requests, r.prompt, 100*r.hitRate(), r.sharedPrefix)
		})
	}
}

// The grid for `make bench-fleet-real`: routes x slots x concurrency on both workloads, and the
// short workload without the host-memory prompt cache. The table goes to the log and to
// $ROLLOUT_FLEET_REAL_OUT.
func TestFleetRoutingRealGrid(t *testing.T) {
	s := env(t)
	if os.Getenv("ROLLOUT_FLEET_REAL") == "" {
		t.Skip("the grid runs under `make bench-fleet-real` (ROLLOUT_FLEET_REAL=1)")
	}
	const n = 12
	routes := []string{"affinity", "round-robin", "least-outstanding"}
	var cases []fleetCase
	// Slots a server against rollouts in flight: 3 servers x slots against concurrency, from a
	// server with fewer rollouts than slots (4 x 3 = 12 slots for 3 rollouts) to one with six
	// rollouts for its one slot.
	for _, sc := range [][2]int{{2, 6}, {1, 6}, {4, 6}, {2, 3}, {2, 12}, {1, 3}, {1, 12}, {4, 3}, {4, 12}} {
		for _, r := range routes {
			cases = append(cases, fleetCase{workload: "short", route: r, slots: sc[0], conc: sc[1]})
		}
	}
	for _, r := range routes {
		cases = append(cases, fleetCase{workload: "short", route: r, slots: 2, conc: 6, noRAM: true})
	}
	for _, sc := range [][2]int{{2, 6}, {1, 6}, {4, 6}} {
		for _, r := range routes {
			cases = append(cases, fleetCase{workload: "long", route: r, slots: sc[0], conc: sc[1]})
		}
	}
	if only := os.Getenv("ROLLOUT_FLEET_REAL_CASES"); only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			t.Fatalf("ROLLOUT_FLEET_REAL_CASES: %v", err)
		}
		var kept []fleetCase
		for _, c := range cases {
			if re.MatchString(c.String()) {
				kept = append(kept, c)
			}
		}
		cases = kept
	}
	tasks := map[string]string{"short": fleetTasks(t, n, 0), "long": fleetTasks(t, n, longNote)}
	if path := os.Getenv("ROLLOUT_FLEET_REAL_OUT"); path != "" {
		if err := os.Remove(path + ".rows"); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| workload | route | slots a server | concurrency | host prompt cache | requests | prompt tokens | processed | cached %% | sim, slot cache | error (points) | sim, block cache | same server as the previous call (real / sim) | shared prefix | per server | mean reward |\n")
	fmt.Fprintf(&b, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) {
			r := s.runFleet(t, tasks[c.workload], n, c)
			ram := "8 GiB"
			if c.noRAM {
				ram = "off"
			}
			blocks, slots := predict(t, tasks[c.workload], n, c)
			row := fmt.Sprintf("| %s | %s | %d | %d | %s | %d | %d | %d | %.1f%% | %.1f%% | %+.1f | %.1f%% | %.0f%% / %.0f%% | %d | %v | %.3f |\n", c.workload, c.route, c.slots, c.conc, ram,
				r.requests, r.prompt, r.prompt-r.cached, 100*r.hitRate(), 100*slots.HitRate, 100*(slots.HitRate-r.hitRate()), 100*blocks.HitRate,
				100*r.stay, 100*slots.Stay, r.sharedPrefix, r.perServer, r.meanReward)
			b.WriteString(row)
			t.Log(row)
			if path := os.Getenv("ROLLOUT_FLEET_REAL_OUT"); path != "" { // each row as it comes: the grid takes an hour on a small machine
				f, err := os.OpenFile(path+".rows", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
				if err == nil {
					_, err = f.WriteString(row)
					f.Close()
				}
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	t.Logf("%d tasks, %d llama-server replicas of the tiny agent:\n%s", n, fleetReplicas, b.String())
	if path := os.Getenv("ROLLOUT_FLEET_REAL_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// longNote is the length in words of the long workload's note per task.
const longNote = 600

// predict runs case c through the serving simulator (fleetbench: the simulator plays the tasks'
// reference plans on three simulated replicas behind the same pool) with its two cache models,
// vLLM's shared block cache and llama-server's slots with their host prompt cache, each the mean
// of predictRuns runs.
func predict(t *testing.T, tasks string, n int, c fleetCase) (blocks, slots fleetbench.Prediction) {
	t.Helper()
	route, err := fleet.ParseRoute(c.route)
	if err != nil {
		t.Fatal(err)
	}
	var res [2]fleetbench.Prediction
	for i, sc := range []serving.Config{simServer(c, false), simServer(c, true)} {
		if res[i], err = fleetbench.Predict(context.Background(), fleetbench.Case{Tasks: tasks, Limit: n, Repeats: 1, Replicas: fleetReplicas,
			Route: route, Concurrency: c.conc, Serving: sc}, predictRuns); err != nil {
			t.Fatal(err)
		}
	}
	return res[0], res[1]
}

const predictRuns = 5

// simServer is the simulated replica of case c: the tiny agent's step costs on a CPU
// (serving.TinyCPU) with llama-server's slots and its host cache (none with --cache-ram 0), or
// with vLLM's block cache.
func simServer(c fleetCase, slots bool) serving.Config {
	cfg := serving.TinyCPU
	cfg.MaxNumSeqs = c.slots
	if c.noRAM {
		cfg.KVCacheTokens = 0
	}
	if !slots {
		cfg.Slots, cfg.BlockTokens, cfg.KVCacheTokens = false, serving.Default.BlockTokens, serving.Default.KVCacheTokens
	}
	return cfg
}
