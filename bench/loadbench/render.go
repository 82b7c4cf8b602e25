package loadbench

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
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
	Missing  string // why it was not measured or not checked
}

// The targets' limits.
const (
	SlotEfficiencyMin = 0.97    // steady model-call rate / slot limit at concurrency 1024, 100 ms
	FloorRatioMax     = 1.5     // runner CPU per turn / the HTTP floor's CPU for a turn's requests
	PeakRSSMaxMB      = 150     // the 10^6 phase's peak RSS, MB (10^6 bytes)
	RSSGrowthMaxPct   = 10      // the runner's RSS from 10^5 tasks done to the largest count sampled
	InFlightMaxKiB    = 64      // the runner's memory per rollout in flight
	ParquetMinRate    = 500_000 // records/s, BenchmarkParquetWrite
	ResumeScanMaxS    = 3       // s, rundir.Compact over 10^6 records
)

// Targets checks the suite against the performance targets.
func (s *Suite) Targets() []Target {
	var ts []Target
	atMost := func(name string, limit, v float64, unit string, ok bool, missing string) *Target {
		t := Target{Name: name, Limit: strings.TrimSpace("≤ " + num(limit) + " " + unit)}
		if !ok {
			t.Missing = missing
		} else {
			t.Measured, t.Ratio, t.Met = strings.TrimSpace(num(v)+" "+unit), v/limit, v <= limit
		}
		ts = append(ts, t)
		return &ts[len(ts)-1]
	}
	atLeast := func(name string, limit, v float64, unit string, ok bool, missing string) *Target {
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
		return &ts[len(ts)-1]
	}
	notRun := func(phase string) string { return "not run (phase " + phase + ")" }

	// The 10^6 phase: peak RSS and growth.
	m := s.Million
	why := notRun("million")
	if m != nil && m.Scenario.Tasks < millionTasks {
		why = fmt.Sprintf("not checked: %s tasks at scale %g (needs 10^6)", thousands(int64(m.Scenario.Tasks)), s.Options.Scale)
	}
	full := m != nil && m.Scenario.Tasks >= millionTasks
	var peak, growth float64
	tasks, last := "10^6", millionTasks // the largest count the RSS was sampled at
	if m != nil {
		peak = float64(m.Runner.MaxRSS) / 1e6
		if n := len(m.Scenario.RSSAt); n > 0 && m.Scenario.RSSAt[n-1] > millionTasks {
			last = m.Scenario.RSSAt[n-1]
			tasks = fmt.Sprintf("10^%d", len(fmt.Sprint(last))-1)
		}
		if r100k, rLast := rssAt(m, 100_000), rssAt(m, last); r100k > 0 && rLast > 0 {
			growth = 100 * (float64(rLast)/float64(r100k) - 1)
		}
	}
	atMost("peak RSS, "+tasks+" tasks at concurrency 1024", PeakRSSMaxMB, peak, "MB", full, why)
	atMost("RSS growth from 10^5 to "+tasks+" tasks", RSSGrowthMaxPct, growth, "%", full, why)

	// CPU per turn against the HTTP floor of the same run.
	why = notRun("zero")
	if s.Zero != nil && s.Floor == nil {
		why = notRun("floor")
	}
	ratio, floorTurn := 0.0, 0.0
	if s.Zero != nil && s.Floor != nil {
		floorTurn = micros(s.Floor.PerRequest()) * s.Zero.Scenario.Shape.RequestsPerTurn()
		if floorTurn > 0 {
			ratio = cpuTurn(s.Zero) / floorTurn
		}
	}
	t := atMost("runner CPU per turn / the HTTP floor for a turn's requests (zero latency, concurrency 64, 3 rounds)", FloorRatioMax, ratio, "",
		s.Zero != nil && s.Floor != nil && floorTurn > 0, why)
	t.Limit = fmt.Sprintf("≤ %.1f× the floor", FloorRatioMax)
	if t.Missing == "" {
		t.Limit += fmt.Sprintf(" (%s µs here)", num(FloorRatioMax*floorTurn))
		t.Measured = fmt.Sprintf("%s µs = %.2f× the floor of %s µs (%s µs a request × %.2f requests a turn)",
			num(cpuTurn(s.Zero)), ratio, num(floorTurn), num(micros(s.Floor.PerRequest())), s.Zero.Scenario.Shape.RequestsPerTurn())
	}

	// Memory per rollout in flight.
	at, from, ok := s.InFlightKiB()
	why = notRun("inflight")
	var mid, top int
	if ok {
		mid, top = s.InFlight[1].Scenario.Concurrency, s.InFlight[2].Scenario.Concurrency
		if mid != inflightConc {
			ok, why = false, fmt.Sprintf("not checked: concurrency %d and %d at scale %g (needs %d and %d; figures below)", mid, top, s.Options.Scale, inflightConc, 4*inflightConc)
		}
	}
	name := fmt.Sprintf("memory per rollout in flight at concurrency %d (1 s model)", inflightConc)
	if t := atMost(name, InFlightMaxKiB, at, "KiB", ok, why); ok {
		b, a := s.InFlight[0], s.InFlight[1]
		t.Measured += fmt.Sprintf(" ((%s − %s MiB) / %d)", num(mib(a.Runner.MaxRSS)), num(mib(b.Runner.MaxRSS)), a.Scenario.Concurrency-b.Scenario.Concurrency)
	}
	name = fmt.Sprintf("memory per rollout in flight from concurrency %d to %d", inflightConc, 4*inflightConc)
	if t := atMost(name, InFlightMaxKiB, from, "KiB", ok, why); ok {
		a, b := s.InFlight[1], s.InFlight[2]
		t.Measured += fmt.Sprintf(" ((%s − %s MiB) / %d)", num(mib(b.Runner.MaxRSS)), num(mib(a.Runner.MaxRSS)), b.Scenario.Concurrency-a.Scenario.Concurrency)
	}

	// Slot efficiency, with the CPU the three processes had.
	c1024 := findLoad(s.Load, 1024)
	// At a smaller scale the scenario is over before its slots fill: no steady state to measure.
	why = notRun("load")
	if c1024 != nil && s.Options.Scale < 1 {
		why, c1024 = fmt.Sprintf("not checked at scale %g: needs a steady state of ten windows of rollouts", s.Options.Scale), nil
	}
	if t := atLeast("slot efficiency, concurrency 1024, 100 ms", SlotEfficiencyMin, eff(c1024), "", c1024 != nil, why); c1024 != nil {
		// What the slots had: the CPU all three processes used of the machine's cores.
		t.Measured += fmt.Sprintf(" (all three processes used %.2f cores of %d)", c1024.Cores(), s.Machine.CPUs)
	}

	pq := Find(s.GoBench, "BenchmarkParquetWrite")
	pqRate := 0.0
	if pq != nil {
		pqRate = pq.Metrics["records/s"]
		if pqRate == 0 && pq.Metrics["ns/op"] > 0 {
			pqRate = 1e9 / pq.Metrics["ns/op"]
		}
	}
	atLeast("Parquet writing (BenchmarkParquetWrite)", ParquetMinRate, pqRate, "records/s", pq != nil, notRun("gobench"))
	why = notRun("million")
	if s.Resume != nil && s.Resume.Records < millionTasks {
		why = fmt.Sprintf("not checked: %s records at scale %g (needs 10^6)", thousands(int64(s.Resume.Records)), s.Options.Scale)
	}
	took := 0.0
	if s.Resume != nil {
		took = s.Resume.Took.Seconds()
	}
	atMost("resume scan of 10^6 records", ResumeScanMaxS, took, "s", s.Resume != nil && s.Resume.Records >= millionTasks, why)
	return ts
}

// PerCore is the rollouts one core of the runner's CPU does per second at one model latency,
// for rollouts of one number of rounds: every scenario of that shape pooled (their rollouts
// over their runner CPU-seconds), and the lowest and highest of them with their concurrencies.
type PerCore struct {
	Latency        time.Duration
	Rounds         int
	Rate           float64
	Low, High      float64
	LowAt, HighAt  int // concurrency
	Scenarios      int
	Rollouts       int
	RunnerCPUTotal time.Duration
}

// PerCore pools the suite's scenarios without prompt padding by model latency and rounds,
// ordered by rounds (3 first: the load phases' shape), then latency.
func (s *Suite) PerCore() []PerCore {
	seen := map[*Result]bool{}
	var all []*Result
	add := func(rs ...*Result) {
		for _, r := range rs {
			if r != nil && !seen[r] && r.Scenario.Shape.PromptBytes == 0 && r.Runner.CPU() > 0 {
				seen[r] = true
				all = append(all, r)
			}
		}
	}
	add(s.Load...)
	add(s.Zero)
	add(s.Conc...)
	if len(s.InFlight) > 1 {
		add(s.InFlight[1:]...) // not the base: two rollouts, mostly the process's start
	}
	add(s.Rounds...)
	add(s.Million)
	var out []PerCore
	for _, r := range all {
		i := slices.IndexFunc(out, func(p PerCore) bool {
			return p.Latency == r.Scenario.Latency && p.Rounds == r.Scenario.Shape.Rounds
		})
		if i < 0 {
			out = append(out, PerCore{Latency: r.Scenario.Latency, Rounds: r.Scenario.Shape.Rounds, Low: r.RolloutsPerCore(), High: r.RolloutsPerCore(),
				LowAt: r.Scenario.Concurrency, HighAt: r.Scenario.Concurrency})
			i = len(out) - 1
		}
		p := &out[i]
		p.Scenarios++
		p.Rollouts += r.Rollouts
		p.RunnerCPUTotal += r.Runner.CPU()
		p.Rate = float64(p.Rollouts) / p.RunnerCPUTotal.Seconds()
		if v := r.RolloutsPerCore(); v < p.Low {
			p.Low, p.LowAt = v, r.Scenario.Concurrency
		} else if v > p.High {
			p.High, p.HighAt = v, r.Scenario.Concurrency
		}
	}
	slices.SortStableFunc(out, func(a, b PerCore) int {
		ra, rb := a.Rounds, b.Rounds
		if ra == LoadRounds {
			ra = -1
		}
		if rb == LoadRounds {
			rb = -1
		}
		if ra != rb {
			return cmp.Compare(ra, rb)
		}
		return cmp.Compare(a.Latency, b.Latency)
	})
	return out
}

// perCoreLine is the summary a machine is picked by: rollouts/s per runner core at each model
// latency measured ("" when no scenario ran).
func (s *Suite) perCoreLine() string {
	ps := s.PerCore()
	if len(ps) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("**Rollouts/s per runner core** (rollouts over the runner's CPU-seconds, all scenarios of a shape pooled; a machine for N rollouts/s at that latency needs N / this many cores for the runner, plus the model's and the tool servers'):")
	for i, p := range ps {
		if i == 0 || p.Rounds != ps[i-1].Rounds {
			if i > 0 {
				b.WriteString(";")
			}
			fmt.Fprintf(&b, " %d-round rollouts:", p.Rounds)
		} else {
			b.WriteString(",")
		}
		lat := "zero latency"
		if p.Latency > 0 {
			lat = p.Latency.String()
		}
		fmt.Fprintf(&b, " **%s at %s**", num(p.Rate), lat)
		if p.Scenarios > 1 && p.LowAt != p.HighAt {
			fmt.Fprintf(&b, " (%s at concurrency %d to %s at %d)", num(p.Low), p.LowAt, num(p.High), p.HighAt)
		}
	}
	b.WriteString(".")
	return b.String()
}

func eff(r *Result) float64 {
	if r == nil {
		return 0
	}
	return r.SlotEfficiency()
}

// ownFloor writes the floor's line for the runner's own transport, when it was measured: for
// comparison with net/http's, which stays the reference.
func ownFloor(w io.Writer, f *Floor) {
	o := f.Own
	if o == nil || o.Requests == 0 {
		return
	}
	ratio := ""
	if p := f.PerRequest(); p > 0 {
		ratio = fmt.Sprintf(", %.2f× net/http's", float64(o.PerRequest())/float64(p))
	}
	fmt.Fprintf(w, "The same requests through the runner's own transport (`runner.NewTransport`, plain http through internal/h1), in turns with net/http's: **the runner's own transport: %s µs a request** (user %s µs, system %s µs; %s requests in %s%s). For comparison only: the floor the runner is held to stays net/http's.\n\n",
		num(micros(o.PerRequest())), num(micros(o.CPU.User/time.Duration(o.Requests))), num(micros(o.CPU.System/time.Duration(o.Requests))),
		thousands(int64(o.Requests)), secs(o.Took), ratio)
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
			t.add(g.Name, g.Limit, g.Missing, "–", "–")
			continue
		}
		met := "**no**"
		if g.Met {
			met = "yes"
		}
		t.add(g.Name, g.Limit, g.Measured, fmt.Sprintf("%.2f", g.Ratio), met)
	}
	t.write(w)
	if line := s.perCoreLine(); line != "" {
		fmt.Fprintf(w, "%s\n\n", line)
	}

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
			fmt.Fprintf(w, "The HTTP floor: Go's net/http client alone (its Transport as the runner configured it before it had its own, keep-alive, %d connections) spends **%s µs of CPU per request** on this machine (user %s µs, system %s µs; %s requests to the simulator in %s). A %d-round rollout makes %d requests (seed_session, %d model calls, %d tool calls, verify, end_session), %.2f per turn, so no runner on net/http could do a turn here for less than **%s µs**; the runner (on its own transport for plain http) takes %s µs, **%.2f× that floor**.\n\n",
				f.Conns, num(per), num(micros(f.CPU.User/time.Duration(f.Requests))), num(micros(f.CPU.System/time.Duration(f.Requests))), thousands(int64(f.Requests)), secs(f.Took),
				z.Scenario.Shape.Rounds, z.Scenario.Shape.Requests(), z.Scenario.Shape.Rounds, z.Scenario.Shape.Rounds-1, rpt, num(per*rpt), num(micros(z.CPUPerTurn())), micros(z.CPUPerTurn())/(per*rpt))
			ownFloor(w, f)
		}
		loadTable([]*Result{z}).write(w)
	}
	if f := s.Floor; f != nil && s.Zero == nil {
		fmt.Fprintf(w, "### HTTP floor\n\nGo's net/http client alone (keep-alive, %d connections): **%s µs of CPU per request** (%s requests to the simulator in %s).\n\n",
			f.Conns, num(micros(f.PerRequest())), thousands(int64(f.Requests)), secs(f.Took))
		ownFloor(w, f)
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
	if len(s.InFlight) > 0 {
		fmt.Fprintf(w, "### Memory per rollout in flight\n\n")
		fmt.Fprintf(w, "%d-round rollouts at %v model latency, three windows of rollouts each (the base: one rollout at a time); the runner's peak RSS (rusage), and per rollout in flight: the growth over the row above, divided by the rollouts in flight added.\n\n", LoadRounds, inflightLatency)
		t := &table{head: []string{"concurrency", "tasks", "rollouts/s", "runner CPU/turn", "runner peak RSS", "KiB per rollout over the row above"}}
		for i, r := range s.InFlight {
			per := "–"
			if i > 0 {
				per = num(kibPerRollout(s.InFlight[i-1], r))
			}
			t.add(fmt.Sprint(r.Scenario.Concurrency), thousands(int64(r.Rollouts)), num(r.RolloutRate()), num(micros(r.CPUPerTurn()))+" µs", num(mib(r.Runner.MaxRSS))+" MiB", per)
		}
		t.write(w)
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
		fmt.Fprintf(w, "Tasks (one-round rollouts streamed from a generator into `rollout run --input -`, concurrency %d, zero latency; RSS sampled when the simulator had answered that many rollouts; at the last count, the largest sample over the run's last 1%%, as a late poll can fall after the runner freed its memory for the end of the run):\n\n", m.Scenario.Concurrency)
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
			fmt.Fprintf(w, "Finish: `rundir.Finish` (journal → rollouts.parquet, summary.json and evaluation.json in one pass, then trajectories.idx, as at the end of every run) over that output: %s records in %s (%s records/s).\n\n", thousands(int64(f.Records)), secs(f.Took), num(f.Rate()))
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
