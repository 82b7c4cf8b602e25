package view

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// Run is one run directory as the pages show it: its manifest, its rollouts as a compact
// table, and its trajectories through their offset index.
type Run struct {
	Dir      string
	Manifest map[string]any // manifest.json (nil when absent)
	// Status is "" for a finished run, else what it is ("incomplete: 171 of 480 rollouts").
	// Live is set while a run writes the directory: its records are read from the journal.
	Status string
	Live   bool
	trajs  *rundir.Trajectories
}

// row is what the pages need of one record: 80 bytes, strings interned (see strs).
type row struct {
	task, rollout     int64
	reward            float64
	latencyMs         float64
	prompt, compl     int64
	rounds, toolCalls int32
	toolErrors        int32
	run               uint16
	hasReward         bool
	id, hash, arm     uint32 // interned strings
	term, fail, src   uint32
	fields            uint32 // task fields: an index into Data.fields
	comps             uint32 // reward components, as interned text
	err               uint32
	endpoint          uint32 // of a pool, the endpoint that answered ("": one endpoint)
}

// strs interns strings: one copy of each, rows hold its number.
type strs struct{ interned[string] }

func (s *strs) intern(v string) uint32 { return s.add(v, func() string { return v }) }

// interned numbers values by a text of theirs: one copy of each, rows hold its number.
type interned[T any] struct {
	list  []T
	index map[string]uint32 // by text
}

// add returns the number of the value of text key, made by value when it is new.
func (t *interned[T]) add(key string, value func() T) uint32 {
	if i, ok := t.index[key]; ok {
		return i
	}
	if t.index == nil {
		t.index = map[string]uint32{}
	}
	i := uint32(len(t.list))
	t.list = append(t.list, value())
	t.index[key] = i
	return i
}

func (t *interned[T]) get(i uint32) T { return t.list[i] }

// Options say how runs are read and scored.
type Options struct {
	// Stats are the statistics' settings (group-by, threshold, bootstrap). With one run and
	// no GroupBy, the run's own evaluation.json is shown when it exists.
	Stats report.StatsOptions
	// StatsSet says Stats was given (flags), so that evaluation.json is not used as is.
	StatsSet bool
	// Baseline is the run (an index) the leaderboard of several runs compares the others with.
	Baseline int
}

// Data is everything the pages show: the runs, their rollouts, the evaluation over them.
type Data struct {
	Runs       []*Run
	rows       []row
	s          strs
	Evaluation *report.Evaluation
	EvalSource string // where the evaluation comes from: a file, or "computed"
	opts       Options
	arms       []string                    // sorted, over all runs
	fields     interned[map[string]string] // task fields, by their text
	sel        selector
	lazy
	groupField string
	// sharesFirst says, for each run, whether it has a task in common with the first.
	sharesFirst []bool
	endpoints   []string // the endpoints of a pool that answered, sorted; none with one endpoint
}

// Load reads the run directories in turn. A directory's records come from rollouts.parquet
// (by column), or from journal.jsonl while it has none; an error names the file.
func Load(dirs []string, o Options) (*Data, error) {
	if len(dirs) == 0 {
		return nil, errors.New("no run directory")
	}
	if len(dirs) > 1<<16 {
		return nil, fmt.Errorf("%d run directories: at most %d", len(dirs), 1<<16)
	}
	d := &Data{opts: o, groupField: o.Stats.GroupBy}
	d.s.intern("")      // string 0 is ""
	d.internFields(nil) // fields 0 are none
	// With one run and no settings of its own, the run's evaluation.json is shown: the
	// records need not be evaluated again.
	evalFile := len(dirs) == 1 && !o.StatsSet && !rundir.Live(dirs[0]) && rundir.HasEvaluation(dirs[0])
	var ev *report.Evaluator
	if !evalFile {
		ev = report.NewEvaluator(o.Stats)
	}
	for i, dir := range dirs {
		st, err := os.Stat(dir)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("%s: not a directory (rollout view reads run directories)", dir)
		}
		r := &Run{Dir: dir}
		if r.Manifest, err = rundir.ReadManifestFields(dir); err != nil {
			return nil, err
		}
		recs, err := rundir.OpenRecords(dir)
		if err != nil {
			return nil, err
		}
		before := len(d.rows)
		if err := d.loadRecords(recs, uint16(i), ev); err != nil {
			return nil, err
		}
		if st, err := rundir.ReadState(dir, len(d.rows)-before); err == nil {
			st.Live = st.Live || recs.Live
			r.Status, r.Live = st.String(), st.Live && st.Known
		}
		if r.trajs, err = rundir.OpenTrajectories(dir); err != nil {
			return nil, err
		}
		d.Runs = append(d.Runs, r)
	}
	armSet, endpointSet := map[string]bool{}, map[string]bool{}
	for i := range d.rows {
		armSet[d.s.get(d.rows[i].arm)] = true
		if e := d.rows[i].endpoint; e != 0 {
			endpointSet[d.s.get(e)] = true
		}
	}
	d.arms, d.endpoints = slices.Sorted(maps.Keys(armSet)), slices.Sorted(maps.Keys(endpointSet))
	if len(d.Runs) > 1 {
		shares := make([]bool, len(d.Runs))
		for i := range d.Runs {
			shares[i] = d.shareTasks(0, i)
		}
		d.sharesFirst = shares
	}
	if o.Baseline < 0 || o.Baseline >= len(dirs) {
		return nil, fmt.Errorf("baseline run %d: want 0 to %d", o.Baseline, len(dirs)-1)
	}
	if !evalFile {
		if err := ev.UnknownGroupBy(); err != nil {
			return nil, err
		}
		d.Evaluation, d.EvalSource = ev.Evaluation(), "computed from the records"
		return d, nil
	}
	e, source, err := rundir.ReadEvaluation(dirs[0])
	if err != nil {
		return nil, err
	}
	d.Evaluation, d.EvalSource = e, source
	d.groupField = e.Options.GroupBy
	return d, nil
}

// loadRecords adds the records of one run directory to the table and the evaluator: from
// rollouts.parquet by column, or from the journal of a run not finished or being written.
func (d *Data) loadRecords(recs *rundir.Records, run uint16, ev *report.Evaluator) error {
	if recs.Parquet {
		return d.loadParquet(recs, run, ev)
	}
	return recs.Scan(func(r *record.Record) error {
		d.add(r, run, ev)
		return nil
	})
}

// add puts one record in the table and the evaluator.
func (d *Data) add(r *record.Record, run uint16, ev *report.Evaluator) {
	if ev != nil {
		ev.Add(r)
	}
	d.rows = append(d.rows, row{
		task: r.TaskIndex, rollout: r.RolloutIndex, reward: r.Reward, latencyMs: r.LatencyMs,
		prompt: r.PromptTokens, compl: r.CompletionTokens, rounds: r.Rounds, toolCalls: r.ToolCalls, toolErrors: r.ToolErrors,
		run: run, hasReward: r.HasReward,
		id: d.s.intern(r.TaskID), hash: d.s.intern(r.TaskHash), arm: d.s.intern(r.Arm),
		term: d.s.intern(r.Termination), fail: d.s.intern(string(r.FailureClass)), src: d.s.intern(r.SourceFile),
		fields: d.internFields(r.TaskFields),
		comps:  d.s.intern(pairs(r.RewardComponents, func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) })),
		err:    d.s.intern(r.Error), endpoint: d.s.intern(r.Endpoint),
	})
}

// pairs writes a map as "k=v, k=v" in key order ("" when empty).
func pairs[V any](m map[string]V, str func(V) string) string {
	if len(m) == 0 {
		return ""
	}
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(str(m[k]))
	}
	return b.String()
}

// internFields returns the number of a record's task fields in d.fields.
func (d *Data) internFields(m map[string]string) uint32 {
	return d.fields.add(pairs(m, strconv.Quote), func() map[string]string { return m })
}

// group is row i's value of the group-by field (report.NoGroup when it has none).
func (d *Data) group(i int) string {
	if v, ok := d.fields.get(d.rows[i].fields)[d.groupField]; ok {
		return v
	}
	return report.NoGroup
}

// Live says whether a run was being written when the runs were read.
func (d *Data) Live() bool {
	for _, r := range d.Runs {
		if r.Live {
			return true
		}
	}
	return false
}

// Rollouts is the number of records over all runs.
func (d *Data) Rollouts() int { return len(d.rows) }

// Arms are the arm names over all runs, sorted.
func (d *Data) Arms() []string { return d.arms }

// record rebuilds the fields of a record the pages and the statistics use from row i.
func (d *Data) record(i int) record.Record {
	r := &d.rows[i]
	return record.Record{
		TaskIndex: r.task, RolloutIndex: r.rollout, TaskID: d.s.get(r.id), TaskHash: d.s.get(r.hash), Arm: d.s.get(r.arm),
		Reward: r.reward, HasReward: r.hasReward, Rounds: r.rounds, ToolCalls: r.toolCalls, ToolErrors: r.toolErrors,
		PromptTokens: r.prompt, CompletionTokens: r.compl, LatencyMs: r.latencyMs, Termination: d.s.get(r.term),
		FailureClass: record.FailureClass(d.s.get(r.fail)), SourceFile: d.s.get(r.src), Error: d.s.get(r.err), Endpoint: d.s.get(r.endpoint),
		TaskFields: d.fields.get(r.fields),
	}
}
