package view

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/rollout-dev/rollout/pkg/report"
)

// loadParquet reads the columns the pages use from rollouts.parquet, a row group at a time
// and a column at a time, straight into the table: no record is built (unless the records
// are to be evaluated), and the other columns (tool names, times, seeds, models) are never
// decoded. A column the file lacks (an older run's) is left zero.
func (d *Data) loadParquet(path string, run uint16, ev *report.Evaluator) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return fmt.Errorf("read parquet %s: %w", path, err)
	}
	d.rows = slices.Grow(d.rows, int(pf.NumRows()))
	if ev != nil {
		ev.Reserve(int(pf.NumRows()))
	}
	col := func(name ...string) int {
		if l, ok := pf.Schema().Lookup(name...); ok {
			return l.ColumnIndex
		}
		return -1
	}
	for g, rg := range pf.RowGroups() {
		base, n := len(d.rows), int(rg.NumRows())
		d.rows = append(d.rows, make([]row, n)...)
		rows := d.rows[base:]
		for i := range rows {
			rows[i].run = run
		}
		c := columnReader{rg: rg, path: path, group: g, n: n}
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
			if err := c.scalar(col(sc.name), sc.set); err != nil {
				return err
			}
		}
		// The maps: each row's entries as text ("k=v, k=v" in key order), interned; a new
		// task-fields text gets its map.
		var text []byte
		var sorted []kv
		entries := func(e []kv, quote bool) string {
			sorted = append(sorted[:0], e...)
			slices.SortFunc(sorted, func(a, b kv) int { return strings.Compare(a.k, b.k) })
			text = text[:0]
			for j, p := range sorted {
				if j > 0 {
					text = append(text, ", "...)
				}
				text = append(text, p.k...)
				text = append(text, '=')
				if quote {
					text = strconv.AppendQuote(text, p.v)
				} else {
					text = append(text, p.v...)
				}
			}
			return string(text)
		}
		err := c.mapRows(col("reward_components", "key_value", "key"), col("reward_components", "key_value", "value"),
			func(v parquet.Value) string { return strconv.FormatFloat(v.Double(), 'g', -1, 64) },
			func(i int, e []kv) { rows[i].comps = d.s.intern(entries(e, false)) })
		if err != nil {
			return err
		}
		err = c.mapRows(col("task_fields", "key_value", "key"), col("task_fields", "key_value", "value"),
			func(v parquet.Value) string { return string(v.ByteArray()) },
			func(i int, e []kv) {
				rows[i].fields = d.fields.add(entries(e, true), func() map[string]string {
					m := make(map[string]string, len(e))
					for _, p := range e {
						m[p.k] = p.v
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
	}
	return nil
}

// columnReader reads the columns of one row group.
type columnReader struct {
	rg    parquet.RowGroup
	path  string
	group int
	n     int
	buf   []parquet.Value
}

// values calls fn with each value of column c, in order.
func (c *columnReader) values(col int, fn func(v parquet.Value) error) error {
	if c.buf == nil {
		c.buf = make([]parquet.Value, 4096)
	}
	pages := c.rg.ColumnChunks()[col].Pages()
	defer pages.Close()
	for {
		p, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return c.err(col, err)
		}
		vr := p.Values()
		for {
			n, err := vr.ReadValues(c.buf)
			for _, v := range c.buf[:n] {
				if err := fn(v); err != nil {
					parquet.Release(p)
					return err
				}
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				parquet.Release(p)
				return c.err(col, err)
			}
		}
		parquet.Release(p)
	}
}

func (c *columnReader) err(col int, err error) error {
	return fmt.Errorf("read parquet %s: row group %d, column %d: %w", c.path, c.group, col, err)
}

// scalar reads a column of one value a row (absent: nothing is read).
func (c *columnReader) scalar(col int, set func(i int, v parquet.Value)) error {
	if col < 0 {
		return nil
	}
	i := 0
	err := c.values(col, func(v parquet.Value) error {
		if i >= c.n {
			return c.err(col, fmt.Errorf("more values than the row group's %d rows", c.n))
		}
		set(i, v)
		i++
		return nil
	})
	if err == nil && i != c.n {
		err = c.err(col, fmt.Errorf("%d values for %d rows", i, c.n))
	}
	return err
}

// kv is a map entry.
type kv struct{ k, v string }

// mapRows reads a map column (its key and value leaves) and calls fn with each row that has
// entries, in order. Keys and values that repeat share one string.
func (c *columnReader) mapRows(keyCol, valCol int, str func(parquet.Value) string, fn func(row int, e []kv)) error {
	if keyCol < 0 || valCol < 0 {
		return nil
	}
	type entry struct {
		row int32
		kv
	}
	var es []entry
	seen := map[string]string{}
	same := func(s string) string {
		if t, ok := seen[s]; ok {
			return t
		}
		if len(seen) < 1<<16 {
			seen[s] = s
		}
		return s
	}
	i := -1
	err := c.values(keyCol, func(v parquet.Value) error {
		if v.RepetitionLevel() == 0 {
			i++
		}
		if i >= c.n {
			return c.err(keyCol, fmt.Errorf("more rows than the row group's %d", c.n))
		}
		if v.DefinitionLevel() > 0 {
			k, ok := seen[string(v.ByteArray())]
			if !ok {
				k = same(string(v.ByteArray()))
			}
			es = append(es, entry{row: int32(i), kv: kv{k: k}})
		}
		return nil
	})
	if err != nil {
		return err
	}
	j := 0
	err = c.values(valCol, func(v parquet.Value) error {
		if v.DefinitionLevel() == 0 {
			return nil
		}
		if j >= len(es) {
			return c.err(valCol, errors.New("more values than keys"))
		}
		es[j].v = same(str(v))
		j++
		return nil
	})
	if err == nil && j != len(es) {
		err = c.err(valCol, fmt.Errorf("%d values for %d keys", j, len(es)))
	}
	if err != nil {
		return err
	}
	var row []kv
	for a := 0; a < len(es); {
		b := a
		row = row[:0]
		for b < len(es) && es[b].row == es[a].row {
			row = append(row, es[b].kv)
			b++
		}
		fn(int(es[a].row), row)
		a = b
	}
	return nil
}

// internBytes interns b's text, copying it only when it is new.
func (s *strs) internBytes(b []byte) uint32 {
	if i, ok := s.index[string(b)]; ok {
		return i
	}
	return s.intern(strings.Clone(string(b)))
}
