package view

import (
	"slices"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// loadParquet reads the columns the pages use from rollouts.parquet, a row group at a time
// and a column at a time, straight into the table: no record is built (unless the records
// are to be evaluated), and the other columns (tool names, times, seeds, models) are never
// decoded. A column the file lacks (an older run's) is left zero.
func (d *Data) loadParquet(recs *rundir.Records, run uint16, ev *report.Evaluator) error {
	return recs.Columns(func(n int) {
		d.rows = slices.Grow(d.rows, n)
		if ev != nil {
			ev.Reserve(n)
		}
	}, func(c *rundir.ColumnGroup) error {
		base, n := len(d.rows), c.N
		d.rows = append(d.rows, make([]row, n)...)
		rows := d.rows[base:]
		for i := range rows {
			rows[i].run = run
		}
		str := func(dst func(r *row) *uint32) func(i int, v parquet.Value) {
			return func(i int, v parquet.Value) { *dst(&rows[i]) = d.s.internBytes(v.ByteArray()) }
		}
		for _, sc := range []struct {
			name string
			set  func(i int, v parquet.Value)
		}{
			{"task_index", func(i int, v parquet.Value) { rows[i].task = v.Int64() }},
			{"rollout_index", func(i int, v parquet.Value) { rows[i].rollout = v.Int64() }},
			{"task_id", str(func(r *row) *uint32 { return &r.id })},
			{"task_hash", str(func(r *row) *uint32 { return &r.hash })},
			{"arm", str(func(r *row) *uint32 { return &r.arm })},
			{"reward", func(i int, v parquet.Value) { rows[i].reward = v.Double() }},
			{"has_reward", func(i int, v parquet.Value) { rows[i].hasReward = v.Boolean() }},
			{"rounds", func(i int, v parquet.Value) { rows[i].rounds = v.Int32() }},
			{"tool_calls", func(i int, v parquet.Value) { rows[i].toolCalls = v.Int32() }},
			{"tool_errors", func(i int, v parquet.Value) { rows[i].toolErrors = v.Int32() }},
			{"prompt_tokens", func(i int, v parquet.Value) { rows[i].prompt = v.Int64() }},
			{"completion_tokens", func(i int, v parquet.Value) { rows[i].compl = v.Int64() }},
			{"latency_ms", func(i int, v parquet.Value) { rows[i].latencyMs = v.Double() }},
			{"termination", str(func(r *row) *uint32 { return &r.term })},
			{"failure_class", str(func(r *row) *uint32 { return &r.fail })},
			{"error", str(func(r *row) *uint32 { return &r.err })},
			{"source_file", str(func(r *row) *uint32 { return &r.src })},
			{"endpoint", str(func(r *row) *uint32 { return &r.endpoint })},
		} {
			if err := c.Scalar(sc.name, sc.set); err != nil {
				return err
			}
		}
		// The maps: each row's entries as text ("k=v, k=v" in key order), interned; a new
		// task-fields text gets its map.
		var text []byte
		var sorted []rundir.KV
		entries := func(e []rundir.KV, quote bool) string {
			sorted = append(sorted[:0], e...)
			slices.SortFunc(sorted, func(a, b rundir.KV) int { return strings.Compare(a.K, b.K) })
			text = text[:0]
			for j, p := range sorted {
				if j > 0 {
					text = append(text, ", "...)
				}
				text = append(text, p.K...)
				text = append(text, '=')
				if quote {
					text = strconv.AppendQuote(text, p.V)
				} else {
					text = append(text, p.V...)
				}
			}
			return string(text)
		}
		err := c.Map("reward_components", func(v parquet.Value) string { return strconv.FormatFloat(v.Double(), 'g', -1, 64) },
			func(i int, e []rundir.KV) { rows[i].comps = d.s.intern(entries(e, false)) })
		if err != nil {
			return err
		}
		err = c.Map("task_fields", func(v parquet.Value) string { return string(v.ByteArray()) },
			func(i int, e []rundir.KV) {
				rows[i].fields = d.fields.add(entries(e, true), func() map[string]string {
					m := make(map[string]string, len(e))
					for _, p := range e {
						m[p.K] = p.V
					}
					return m
				})
			})
		if err != nil {
			return err
		}
		if ev != nil {
			for i := range rows {
				r := d.record(base + i)
				ev.Add(&r)
			}
		}
		return nil
	})
}

// internBytes interns b's text, copying it only when it is new.
func (s *strs) internBytes(b []byte) uint32 {
	if i, ok := s.index[string(b)]; ok {
		return i
	}
	return s.intern(strings.Clone(string(b)))
}
