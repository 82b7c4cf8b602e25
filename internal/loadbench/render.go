package loadbench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Target is one of the performance targets and what the suite measured against it.
type Target struct {
	Name     string
	Limit    string
	Measured string
	Ratio    float64 // measured / limit, or limit / measured for "at least" targets: <= 1 is met
	Met      bool
	Missing  string // why it was not measured
}

// Targets checks the suite against the performance targets.
func (s *Suite) Targets() []Target {
	var ts []Target
	atMost := func(name string, limit, v float64, unit string, ok bool, missing string) {
		t := Target{Name: name, Limit: strings.TrimSpace("≤ " + num(limit) + " " + unit)}
		if !ok {
			t.Missing = missing
		} else {
			t.Measured, t.Ratio, t.Met = strings.TrimSpace(num(v)+" "+unit), v/limit, v <= limit
		}
		ts = append(ts, t)
	}
	atLeast := func(name string, limit, v float64, unit string, ok bool, missing string) {
		t := Target{Name: name, Limit: strings.TrimSpace("≥ " + num(limit) + " " + unit)}
		if !ok {
			t.Missing = missing
		} else {
			t.Measured, t.Met = strings.TrimSpace(num(v)+" "+unit), v >= limit
			if v > 0 {
				t.Ratio = limit / v
			}
		}
		ts = append(ts, t)
	}
	c1024 := findLoad(s.Load, 1024)
	// At a smaller scale the scenario is over before its slots fill: no steady state to measure.
	why1024 := "load phase not run"
	if c1024 != nil && s.Options.Scale < 1 {
		why1024, c1024 = "needs the full scale (a steady state of ten windows of rollouts)", nil
	}
	atLeast("slot efficiency, concurrency 1024, 100 ms", 0.97, eff(c1024), "", c1024 != nil, why1024)
	if c1024 != nil {
		// What the slots had: the CPU all three processes used of the machine's cores.
		ts[len(ts)-1].Measured += fmt.Sprintf(" (all three processes used %.2f cores of %d)", c1024.Cores(), s.Machine.CPUs)
	}
	atMost("runner CPU per turn (zero latency, concurrency 64, 3 rounds)", 60, cpuTurn(s.Zero), "µs", s.Zero != nil, "zero phase not run")
	m := s.Million
	full := m != nil && m.Scenario.Tasks >= millionTasks
	why := "million phase not run at full scale"
	var peak, growth float64
	tasks, last := "10^6", millionTasks // the largest count the RSS was sampled at
	if m != nil {
		peak = mib(m.Runner.MaxRSS) * (1 << 20) / 1e6
		if n := len(m.Scenario.RSSAt); n > 0 && m.Scenario.RSSAt[n-1] > millionTasks {
			last = m.Scenario.RSSAt[n-1]
			tasks = fmt.Sprintf("10^%d", len(fmt.Sprint(last))-1)
		}
		if r100k, rLast := rssAt(m, 100_000), rssAt(m, last); r100k > 0 && rLast > 0 {
			growth = 100 * (float64(rLast)/float64(r100k) - 1)
		}
	}
	atMost("peak RSS, "+tasks+" tasks at concurrency 1024", 300, peak, "MB", full, why)
	atMost("RSS growth from 10^5 to "+tasks+" tasks", 10, growth, "%", full, why)
	pq := Find(s.GoBench, "BenchmarkParquetWrite")
	pqRate := 0.0
	if pq != nil {
		pqRate = pq.Metrics["records/s"]
		if pqRate == 0 && pq.Metrics["ns/op"] > 0 {
			pqRate = 1e9 / pq.Metrics["ns/op"]
		}
	}
	atLeast("Parquet writing (BenchmarkParquetWrite)", 500_000, pqRate, "records/s", pq != nil, "gobench phase not run")
	resumeFull := s.Resume != nil && s.Resume.Records >= millionTasks
	took := 0.0
	if s.Resume != nil {
		took = s.Resume.Took.Seconds()
	}
	atMost("resume scan of 10^6 records", 3, took, "s", resumeFull, why)
	return ts
}

func eff(r *Result) float64 {
	if r == nil {
		return 0
	}
	return r.SlotEfficiency()
}

func cpuTurn(r *Result) float64 {
	if r == nil {
		return 0
	}
	return micros(r.CPUPerTurn())
}

func rssAt(r *Result, n int) int64 {
	for i, k := range r.Scenario.RSSAt {
		if k == n {
			return r.RSSAt[i]
		}
	}
	return 0
}

// num formats a figure with 3 significant digits, thousands separated.
func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000:
		return thousands(int64(v + 0.5))
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func secs(d time.Duration) string { return num(d.Seconds()) + " s" }

type table struct {
	head []string
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) {
	fmt.Fprintf(w, "| %s |\n|", strings.Join(t.head, " | "))
	for range t.head {
		fmt.Fprint(w, " --- |")
	}
	fmt.Fprintln(w)
	for _, r := range t.rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
	fmt.Fprintln(w)
}

func loadTable(rs []*Result) *table {
	t := &table{head: []string{"scenario", "tasks", "concurrency", "latency", "model calls", "steady calls/s", "slot limit", "slot efficiency", "rollouts/s", "rollouts/s per runner core", "runner CPU/turn", "runner peak RSS", "sim CPU/call", "server CPU/rollout", "all three processes' CPU / wall", "wall"}}
	for _, r := range rs {
		limit, e := "–", "–"
		if r.SlotLimit() > 0 {
			limit, e = num(r.SlotLimit()), fmt.Sprintf("%.3f", r.SlotEfficiency())
		}
		t.add(r.Scenario.Name, thousands(int64(r.Rollouts)), fmt.Sprint(r.Scenario.Concurrency), r.Scenario.Latency.String(),
			thousands(r.ModelCalls), num(r.SteadyCallRate), limit, e, num(r.RolloutRate()), num(r.RolloutsPerCore()),
			num(micros(r.CPUPerTurn()))+" µs", num(mib(r.Runner.MaxRSS))+" MiB",
			num(micros(r.Sim.CPU()/time.Duration(max(r.ModelCalls, 1))))+" µs",
			num(micros(r.Server.CPU()/time.Duration(max(int64(r.Rollouts), 1))))+" µs", fmt.Sprintf("%.2f cores", r.Cores()), secs(r.Wall))
	}
	return t
}

// Markdown writes the suite's figures: targets first, then every phase's raw numbers.
func (s *Suite) Markdown(w io.Writer) {
	fmt.Fprintf(w, "Run on %s; the suite took %s.\n\n", s.Started.UTC().Format("2006-01-02 15:04 MST"), s.Took.Round(time.Second))
	fmt.Fprintf(w, "Machine: %s, %d CPUs, %.0f GiB, %s, %s.\n\n", s.Machine.CPU, s.Machine.CPUs, s.Machine.MemoryGiB, s.Machine.OS, s.Machine.Go)
	if s.Options.Scale != 1 {
		fmt.Fprintf(w, "**Scale %g**: task counts are %g× the full suite's; targets that need the full scale are not checked.\n\n", s.Options.Scale, s.Options.Scale)
	}

	fmt.Fprintf(w, "### Targets\n\n")
	t := &table{head: []string{"target", "limit", "measured", "ratio to the limit (≤ 1 is met)", "met"}}
	for _, g := range s.Targets() {
		if g.Missing != "" {
			t.add(g.Name, g.Limit, "not measured: "+g.Missing, "–", "–")
			continue
		}
		met := "**no**"
		if g.Met {
			met = "yes"
		}
		t.add(g.Name, g.Limit, g.Measured, fmt.Sprintf("%.2f", g.Ratio), met)
	}
	t.write(w)

	if len(s.Load) > 0 {
		fmt.Fprintf(w, "### Load: %v model latency, %d-round rollouts (and concurrency 1024 at 1 s)\n\n", LoadLatency, LoadRounds)
		fmt.Fprintf(w, "Three processes on loopback: `rollout run`, `rollout sim --latency %v`, `rollout serve counter`. Steady calls/s is the simulator's answer rate between 10%% and 90%% of the run's calls; the slot limit is concurrency / latency. CPU figures are each process's rusage (user + system) over its whole life, divided by the runner's turns (model calls) or rollouts.\n\n", LoadLatency)
		loadTable(s.Load).write(w)
	}
	if s.Zero != nil {
		z := s.Zero
		fmt.Fprintf(w, "### Zero latency\n\n")
		fmt.Fprintf(w, "%s tasks of %d rounds at concurrency %d: **%s turns/s** (model calls/s, steady), %s rollouts/s; the runner's CPU: **%s µs per turn** (user %s µs, system %s µs), %s CPU-seconds for %s turns.",
			thousands(int64(z.Rollouts)), z.Scenario.Shape.Rounds, z.Scenario.Concurrency, num(z.SteadyCallRate), num(z.RolloutRate()),
			num(micros(z.CPUPerTurn())), num(micros(z.Runner.User/time.Duration(z.ModelCalls))), num(micros(z.Runner.System/time.Duration(z.ModelCalls))),
			num(z.Runner.CPU().Seconds()), thousands(z.ModelCalls))
		if c := s.Ceiling; c != nil && c.Skipped == "" && c.RPS > 0 {
			fmt.Fprintf(w, " That is **%.2f of the simulator's HTTP ceiling** below.", z.SteadyCallRate/c.RPS)
		}
		fmt.Fprintf(w, "\n\n")
		if f := s.Floor; f != nil {
			per := micros(f.PerRequest())
			rpt := z.Scenario.Shape.RequestsPerTurn()
			fmt.Fprintf(w, "The HTTP floor: Go's HTTP client alone (the runner's transport, keep-alive, %d connections) spends **%s µs of CPU per request** on this machine (user %s µs, system %s µs; %s requests to the simulator in %s). A %d-round rollout makes %d requests (seed_session, %d model calls, %d tool calls, verify), %.2f per turn, so no runner on net/http can do a turn here for less than **%s µs**; the runner's %s µs is **%.2f× that floor**.\n\n",
				f.Conns, num(per), num(micros(f.CPU.User/time.Duration(f.Requests))), num(micros(f.CPU.System/time.Duration(f.Requests))), thousands(int64(f.Requests)), secs(f.Took),
				z.Scenario.Shape.Rounds, z.Scenario.Shape.Requests(), z.Scenario.Shape.Rounds, z.Scenario.Shape.Rounds-1, rpt, num(per*rpt), num(micros(z.CPUPerTurn())), micros(z.CPUPerTurn())/(per*rpt))
		}
		loadTable([]*Result{z}).write(w)
	}
	if f := s.Floor; f != nil && s.Zero == nil {
		fmt.Fprintf(w, "### HTTP floor\n\nGo's HTTP client alone (the runner's transport, keep-alive, %d connections): **%s µs of CPU per request** (%s requests to the simulator in %s).\n\n",
			f.Conns, num(micros(f.PerRequest())), thousands(int64(f.Requests)), secs(f.Took))
	}
	if c := s.Ceiling; c != nil {
		fmt.Fprintf(w, "### Simulator HTTP ceiling\n\n")
		if c.Skipped != "" {
			fmt.Fprintf(w, "Not measured: %s.\n\n", c.Skipped)
		} else {
			fmt.Fprintf(w, "`%s`, replaying the first model request of a 3-round task at zero latency (the load generator and the simulator share the machine): **%s requests/s**, %s requests, %d errors; the simulator's CPU: %s µs per request.\n\n",
				c.Command, num(c.RPS), thousands(c.Requests), c.Errors, num(micros(c.Sim.CPU()/time.Duration(max(c.Requests, 1)))))
		}
	}
	if len(s.Rounds) > 0 || len(s.Size) > 0 || len(s.Conc) > 0 || s.Million != nil {
		fmt.Fprintf(w, "### Scaling\n\n")
	}
	if len(s.Rounds) > 0 {
		fmt.Fprintf(w, "Rounds per rollout (zero latency, concurrency %d):\n\n", zeroConc)
		t := &table{head: []string{"rounds", "tasks", "turns/s", "rollouts/s", "runner CPU/turn", "runner CPU/rollout", "runner peak RSS"}}
		for _, r := range s.Rounds {
			t.add(fmt.Sprint(r.Scenario.Shape.Rounds), thousands(int64(r.Rollouts)), num(r.SteadyCallRate), num(r.RolloutRate()),
				num(micros(r.CPUPerTurn()))+" µs", num(micros(r.Runner.CPU()/time.Duration(max(r.Rollouts, 1))))+" µs", num(mib(r.Runner.MaxRSS))+" MiB")
		}
		t.write(w)
	}
	if len(s.Size) > 0 {
		fmt.Fprintf(w, "Conversation size: a system message of this many bytes in every model call (zero latency, concurrency %d, %d rounds):\n\n", zeroConc, LoadRounds)
		t := &table{head: []string{"prompt bytes", "tasks", "turns/s", "runner CPU/turn", "sim CPU/call", "runner peak RSS"}}
		for _, r := range s.Size {
			t.add(thousands(int64(r.Scenario.Shape.PromptBytes)), thousands(int64(r.Rollouts)), num(r.SteadyCallRate), num(micros(r.CPUPerTurn()))+" µs",
				num(micros(r.Sim.CPU()/time.Duration(max(r.ModelCalls, 1))))+" µs", num(mib(r.Runner.MaxRSS))+" MiB")
		}
		t.write(w)
	}
	if len(s.Conc) > 0 {
		fmt.Fprintf(w, "Concurrency (%v latency, %d rounds):\n\n", LoadLatency, LoadRounds)
		t := &table{head: []string{"concurrency", "slot limit calls/s", "steady calls/s", "slot efficiency", "runner CPU/turn", "runner peak RSS", "all three processes' CPU / wall"}}
		for _, r := range s.Conc {
			t.add(fmt.Sprint(r.Scenario.Concurrency), num(r.SlotLimit()), num(r.SteadyCallRate), fmt.Sprintf("%.3f", r.SlotEfficiency()),
				num(micros(r.CPUPerTurn()))+" µs", num(mib(r.Runner.MaxRSS))+" MiB", fmt.Sprintf("%.2f cores", r.Cores()))
		}
		t.write(w)
	}
	if m := s.Million; m != nil {
		fmt.Fprintf(w, "Tasks (one-round rollouts streamed from a generator into `rollout run --input -`, concurrency %d, zero latency; RSS sampled when the simulator had answered that many rollouts):\n\n", m.Scenario.Concurrency)
		t := &table{head: []string{"rollouts done", "time", "runner RSS"}}
		for i, k := range m.Scenario.RSSAt {
			at := time.Duration(0)
			for _, smp := range m.Samples {
				if smp.Rollouts >= int64(k) {
					at = smp.At
					break
				}
			}
			rss := "–"
			if m.RSSAt[i] > 0 {
				rss = num(mib(m.RSSAt[i])) + " MiB"
			}
			t.add(thousands(int64(k)), secs(at), rss)
		}
		t.write(w)
		fmt.Fprintf(w, "The whole run: %s rollouts in %s (%s rollouts/s), peak RSS (rusage) **%s MiB**, runner CPU %s µs per rollout (%s rollouts/s per runner core).\n\n",
			thousands(int64(m.Rollouts)), secs(m.Wall), num(m.RolloutRate()), num(mib(m.Runner.MaxRSS)), num(micros(m.Runner.CPU()/time.Duration(max(m.Rollouts, 1)))), num(m.RolloutsPerCore()))
		if r := s.Resume; r != nil {
			fmt.Fprintf(w, "Resume: `rundir.Compact` (what `--resume` does first) over that output: %s records in **%s** (%s records/s).\n\n", thousands(int64(r.Records)), secs(r.Took), num(r.Rate()))
		}
		if f := s.Finalize; f != nil {
			fmt.Fprintf(w, "Finalize: `rundir.Finalize` (journal → rollouts.parquet and summary.json, as at the end of every run) over that output: %s records in %s (%s records/s).\n\n", thousands(int64(f.Records)), secs(f.Took), num(f.Rate()))
		}
	}
	if len(s.GoBench) > 0 {
		fmt.Fprintf(w, "### Go benchmarks\n\n`go test -run '^$' -bench . -benchmem -count 1 %s`:\n\n", strings.Join(s.Options.GoBenchPackages, " "))
		t := &table{head: []string{"package", "benchmark", "iterations", "figures"}}
		for _, b := range s.GoBench {
			var f []string
			for _, u := range b.Units {
				f = append(f, num(b.Metrics[u])+" "+u)
			}
			t.add(strings.TrimPrefix(b.Package, "github.com/rollout-dev/rollout/"), b.Name, thousands(b.N), strings.Join(f, ", "))
		}
		t.write(w)
	}
}

// Markers delimit the generated part of BENCHMARKS.md.
const (
	BeginMarker = "<!-- make bench: begin (generated; edit outside the markers) -->"
	EndMarker   = "<!-- make bench: end -->"
)

// UpdateFile replaces the generated part of the markdown file at path with gen (appending it
// when the markers are missing); the rest of the file, the findings written by hand, stays.
func UpdateFile(path string, gen []byte) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var b bytes.Buffer
	i, j := bytes.Index(old, []byte(BeginMarker)), bytes.Index(old, []byte(EndMarker))
	switch {
	case i >= 0 && j > i:
		b.Write(old[:i])
		b.WriteString(BeginMarker + "\n\n")
		b.Write(gen)
		b.Write(old[j:])
	case i >= 0 || j >= 0:
		return fmt.Errorf("%s: one of the markers is missing or out of order (%q … %q)", path, BeginMarker, EndMarker)
	default:
		b.Write(old)
		if len(old) > 0 && !bytes.HasSuffix(old, []byte("\n")) {
			b.WriteByte('\n')
		}
		b.WriteString("\n" + BeginMarker + "\n\n")
		b.Write(gen)
		b.WriteString(EndMarker + "\n")
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
