package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/internal/testnet"
	"github.com/rollout-dev/rollout/pkg/fleet"
	"github.com/rollout-dev/rollout/pkg/sim/serving"
)

// startSimProcess starts `rollout sim --replicas n` as a process and returns its replicas' base
// URLs (…/v1, read from its stdout) and the process.
func startSimProcess(t *testing.T, tasks string, n int) ([]string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(buildRollout(t), "sim", "--tasks", tasks, "--replicas", strconv.Itoa(n), "--speed", "50", "--max-num-seqs", "8")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	var urls []string
	for len(urls) < n && sc.Scan() {
		urls = append(urls, strings.TrimSpace(sc.Text()))
	}
	if len(urls) < n {
		t.Fatalf("rollout sim --replicas %d printed %v", n, urls)
	}
	return urls, cmd
}

// endpointsFile reads a run's endpoints.json.
func endpointsFile(t *testing.T, dir string) (eps []fleet.EndpointStats, events []fleet.Event) {
	t.Helper()
	var f struct {
		Endpoints []fleet.EndpointStats `json:"endpoints"`
		Events    []fleet.Event         `json:"events"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, EndpointsFile))), &f); err != nil {
		t.Fatal(err)
	}
	return f.Endpoints, f.Events
}

// A run against a fleet of two real `rollout sim --replicas 2` processes (four endpoints on
// loopback), with --concurrency auto: every rollout's rounds stay on one endpoint, each record
// names it, the summary has the per-endpoint table, and the servers' own /stats agree with the
// pool's counts and show the repeats' prompts cached. Then one process is killed: its endpoints
// are ejected, and the run still scores every rollout.
func TestFleetOfSimProcesses(t *testing.T) {
	input := headLines(t, extractionData, 6)
	a, procA := startSimProcess(t, input, 2)
	b, _ := startSimProcess(t, input, 2)
	urls := append(a, b...)
	dir := filepath.Join(t.TempDir(), "out")
	args := []string{"run", "--input", input, "--model-url", urls[0], "--model-url", strings.Join(urls[1:], ","), "--model", "rollout-sim",
		"--server", "builtin:extraction", "--num-repeats", "4", "--concurrency", "auto:16", "--out", dir, "--quiet"}
	r := runCLI(t, context.Background(), nil, args...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	recs := readRecords(t, dir)
	hosts := map[string]bool{}
	for _, u := range urls {
		hosts[strings.TrimSuffix(strings.TrimPrefix(u, "http://"), "/v1")] = true
	}
	for _, rec := range recs {
		if !hosts[rec.Endpoint] || rec.FailureClass != "" {
			t.Errorf("record %d/%d: endpoint %q, failure %q", rec.TaskIndex, rec.RolloutIndex, rec.Endpoint, rec.FailureClass)
		}
	}
	if len(recs) != 24 {
		t.Fatalf("%d records, want 24", len(recs))
	}
	rounds := 0
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "trajectories.jsonl"))), "\n") {
		var l struct {
			Trajectory struct {
				Rounds []struct {
					Endpoint string `json:"endpoint"`
				} `json:"rounds"`
			} `json:"trajectory"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		tr := l.Trajectory
		for _, rd := range tr.Rounds {
			if rd.Endpoint != tr.Rounds[0].Endpoint || !hosts[rd.Endpoint] {
				t.Errorf("a rollout's rounds went to %q and %q", tr.Rounds[0].Endpoint, rd.Endpoint)
			}
		}
		rounds += len(tr.Rounds)
	}
	eps, _ := endpointsFile(t, dir)
	var calls, served, cached int64
	for _, e := range eps {
		calls += e.Calls
		if e.Limit == 0 {
			t.Errorf("endpoint %s: no adaptive limit with --concurrency auto", e.Name)
		}
	}
	for _, u := range urls {
		resp, err := http.Get(strings.TrimSuffix(u, "/v1") + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		var st []serving.Stats
		json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		served += st[0].Requests
		cached += st[0].CachedTokens
	}
	if calls != int64(rounds) || served != calls {
		t.Errorf("the pool counted %d calls, the trajectories have %d rounds, the servers served %d", calls, rounds, served)
	}
	if cached == 0 {
		t.Error("no prompt token was found in any server's prefix cache")
	}
	if !strings.Contains(r.stdout, "endpoint") || !strings.Contains(r.stdout, "p99 ms") {
		t.Errorf("no per-endpoint table in the summary:\n%s", r.stdout)
	}

	// One process dies: its two endpoints are ejected, the other two serve every rollout. The
	// run routes round-robin, so that each dead endpoint is sent two attempts before the run
	// ends: with affinity, where 6 tasks land on the ring of 4 endpoints depends on their
	// ports, and a dead endpoint that is the home of one rollout only fails once (CI saw it).
	procA.Process.Kill()
	procA.Wait()
	dir2 := filepath.Join(t.TempDir(), "out")
	args2 := append([]string{}, args...)
	args2[len(args2)-2] = dir2
	r = runCLI(t, context.Background(), nil, append(args2, "--no-preflight", "--eject-after", "2", "--concurrency", "8", "--route", "round-robin")...)
	if r.code != 0 {
		t.Fatalf("with two endpoints down: exit %d: %s", r.code, r.stderr)
	}
	for _, rec := range readRecords(t, dir2) {
		if rec.FailureClass != "" || rec.Endpoint == strings.TrimSuffix(strings.TrimPrefix(a[0], "http://"), "/v1") {
			t.Errorf("record %d/%d: failure %q, endpoint %s", rec.TaskIndex, rec.RolloutIndex, rec.FailureClass, rec.Endpoint)
		}
	}
	_, events := endpointsFile(t, dir2)
	ejected := map[string]bool{}
	for _, e := range events {
		if e.What == "ejected" {
			ejected[e.Endpoint] = true
		}
	}
	if len(ejected) != 2 {
		t.Errorf("ejected %v, want the two endpoints of the killed process", ejected)
	}
	if !strings.Contains(r.stdout, "ejected: 2 consecutive failures") {
		t.Errorf("the summary does not say which endpoint failed:\n%s", r.stdout)
	}
}

// --model-url checks and endpoints: in --config.
func TestFleetFlags(t *testing.T) {
	input := headLines(t, extractionData, 2)
	cfg := filepath.Join(t.TempDir(), "run.yaml")
	for _, tc := range []struct {
		name, config string
		args         []string
		want         string
	}{
		{"empty url in the list", "", []string{"--model-url", "http://a:1/v1,,http://b:1/v1"}, "rollout: --model-url http://a:1/v1,,http://b:1/v1: an empty URL in the list"},
		{"bad route", "", []string{"--model-url", "http://a:1/v1,http://b:1/v1", "--route", "random"}, `rollout: --route: unknown route "random": want affinity, least-outstanding, round-robin`},
		{"bad concurrency", "", []string{"--concurrency", "auto:x"}, `want auto or auto:MAX with MAX a whole number >= 1, got "auto:x"`},
		{"auto with the plain simulator", "", []string{"--concurrency", "auto"}, "--concurrency auto adapts to a model server's latency; builtin:sim has none to adapt to (with builtin:sim, give --sim-replicas N)"},
		{"endpoint without url", "endpoints:\n  - {model: m}\n", nil, "run.yaml:2: endpoints: an endpoint needs a url"},
		{"endpoint bad weight", "endpoints:\n  - {url: http://a:1/v1, weight: -2}\n", nil, `run.yaml:2: endpoints: weight: want a number > 0, got "-2"`},
		{"endpoint unknown key", "endpoints:\n  - url: http://a:1/v1\n    colour: red\n", nil, `run.yaml:3: endpoints: unknown key "colour"`},
		{"endpoint url without scheme", "endpoints:\n  - localhost:8000/v1\n", nil, "run.yaml:2: endpoints: url localhost:8000/v1: want an http:// or https:// URL"},
		{"both", "endpoints:\n  - http://a:1/v1\n", []string{"--model-url", "http://b:1/v1"}, "the config file lists the endpoints; give them there or with --model-url, not both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"run", "--input", input, "--server", "builtin:extraction", "--model", "m"}
			if tc.config != "" {
				os.WriteFile(cfg, []byte(tc.config), 0o644)
				args = append(args, "--config", cfg)
			} else if !strings.Contains(strings.Join(tc.args, " "), "--model-url") {
				args = append(args, "--model-url", "builtin:sim")
			}
			r := runCLI(t, context.Background(), nil, append(args, tc.args...)...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, exitUsage, tc.want)
			}
		})
	}
}

// endpoints: in --config gives each endpoint its model, key (from its variable) and weight; a
// run against two loopback simulators sends each its own model name and key.
func TestFleetConfigEndpoints(t *testing.T) {
	input := headLines(t, extractionData, 3)
	urls, _ := startSimProcess(t, input, 2)
	cfg := filepath.Join(t.TempDir(), "run.yaml")
	os.WriteFile(cfg, []byte("endpoints:\n  - {url: "+urls[0]+", model: rollout-sim, api-key-env: KEY_A, name: left, weight: 2}\n  - {url: "+urls[1]+", name: right, max-concurrency: 2}\n"), 0o644)
	dir := filepath.Join(t.TempDir(), "out")
	r := runCLI(t, context.Background(), map[string]string{"KEY_A": "secret-a"}, "run", "--config", cfg, "--input", input, "--model", "rollout-sim",
		"--server", "builtin:extraction", "--num-repeats", "2", "--out", dir, "--quiet", "--route", "least-outstanding")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	eps, _ := endpointsFile(t, dir)
	if len(eps) != 2 || eps[0].Name != "left" || eps[1].Name != "right" || eps[1].Limit != 2 || eps[0].Calls == 0 || eps[1].Calls == 0 {
		t.Errorf("endpoints %+v", eps)
	}
	if strings.Contains(readFile(t, filepath.Join(dir, EndpointsFile)), "secret-a") {
		t.Error("the key is in endpoints.json")
	}
	// summary.json keeps the same table, and rollout report prints it from there.
	summary := readFile(t, filepath.Join(dir, "summary.json"))
	var sum struct {
		Rollouts  int                   `json:"rollouts"`
		Endpoints []fleet.EndpointStats `json:"endpoints"`
	}
	if err := json.Unmarshal([]byte(summary), &sum); err != nil {
		t.Fatal(err)
	}
	if len(sum.Endpoints) != 2 || sum.Endpoints[0].Name != "left" || sum.Endpoints[0].Calls != eps[0].Calls || sum.Endpoints[1].Calls != eps[1].Calls || sum.Endpoints[0].Calls+sum.Endpoints[1].Calls < int64(sum.Rollouts) {
		t.Errorf("summary.json endpoints %+v, endpoints.json %+v (rollouts %d)", sum.Endpoints, eps, sum.Rollouts)
	}
	if strings.Contains(summary, "secret-a") {
		t.Error("the key is in summary.json")
	}
	for _, format := range []string{"text", "markdown"} {
		rep := runCLI(t, context.Background(), nil, "report", dir, "--format", format)
		if rep.code != 0 {
			t.Fatalf("report --format %s: exit %d: %s", format, rep.code, rep.stderr)
		}
		_, table, ok := strings.Cut(rep.stdout, "Endpoints of "+dir)
		if !ok {
			t.Fatalf("report --format %s has no endpoint table:\n%s", format, rep.stdout)
		}
		for i, name := range []string{"left", "right"} {
			row := regexp.MustCompile(`(?m)^` + name + ` +(\d+) `).FindStringSubmatch(table)
			if row == nil || row[1] != strconv.FormatInt(eps[i].Calls, 10) {
				t.Errorf("report --format %s: row of %s %q, want %d calls:\n%s", format, name, row, eps[i].Calls, table)
			}
		}
		if format == "markdown" && strings.Count(table, "```") != 2 {
			t.Errorf("report --format markdown: the table is not in a code block:\n%s", table)
		}
	}
	rep := runCLI(t, context.Background(), nil, "report", dir, "--format", "json")
	if rep.code != 0 || strings.Contains(rep.stdout, "Endpoints of") || !json.Valid([]byte(rep.stdout)) {
		t.Errorf("report --format json: exit %d, not JSON alone:\n%s", rep.code, rep.stdout)
	}
}

// A pool's URLs are each redacted in the manifest: a password in the second is not kept.
func TestRedactURLs(t *testing.T) {
	got := redactURLs("http://a:1/v1,http://u:hunter22@b:1/v1?key=k2secret")
	if strings.Contains(got, "hunter22") || strings.Contains(got, "k2secret") || !strings.HasPrefix(got, "http://a:1/v1,http://REDACTED@b:1/v1") {
		t.Errorf("redactURLs = %s", got)
	}
}

// --concurrency auto with one endpoint makes a pool of one, whose limit adapts.
func TestAutoOneEndpoint(t *testing.T) {
	input := headLines(t, extractionData, 3)
	urls, _ := startSimProcess(t, input, 1)
	dir := filepath.Join(t.TempDir(), "out")
	r := runCLI(t, context.Background(), nil, "run", "--input", input, "--model-url", urls[0], "--model", "rollout-sim",
		"--server", "builtin:extraction", "--num-repeats", "2", "--concurrency", "auto:8", "--out", dir, "--quiet")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	eps, _ := endpointsFile(t, dir)
	if len(eps) != 1 || eps[0].Limit < 1 || eps[0].Limit > 8 || eps[0].Calls == 0 {
		t.Errorf("endpoints %+v", eps)
	}
}

// An endpoint's URL secrets (a query value) that a connection error echoes are not in the
// printed table nor in endpoints.json.
func TestFleetRedactsEvents(t *testing.T) {
	input := headLines(t, extractionData, 2)
	urls, _ := startSimProcess(t, input, 1)
	dead := testnet.ClosedPort(t) + "/v1?key=topsecret-value-1234"
	dir := filepath.Join(t.TempDir(), "out")
	r := runCLI(t, context.Background(), nil, "run", "--input", input, "--model-url", urls[0]+","+dead, "--model", "rollout-sim",
		"--server", "builtin:extraction", "--num-repeats", "4", "--out", dir, "--quiet", "--no-preflight", "--eject-after", "1", "--route", "round-robin")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	file := readFile(t, filepath.Join(dir, EndpointsFile))
	if !strings.Contains(r.stdout, "ejected: 1 consecutive failures") {
		t.Fatalf("no ejection in the summary:\n%s", r.stdout)
	}
	summary := readFile(t, filepath.Join(dir, "summary.json"))
	if !strings.Contains(summary, `"endpoints"`) {
		t.Errorf("summary.json has no endpoints:\n%s", summary)
	}
	if strings.Contains(r.stdout+file+summary, "topsecret-value-1234") {
		t.Errorf("the secret is in the output:\n%s\n%s\n%s", r.stdout, file, summary)
	}
}
