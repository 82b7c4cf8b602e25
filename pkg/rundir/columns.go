package rundir

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/parquet-go/parquet-go"
)

// Columns reads the records of rollouts.parquet (Parquet) a row group at a time and a column
// at a time: rows, when set, is first told how many rows the file has; then group is called
// with each row group, to read the columns it wants. No record is built, and columns not
// asked for are never decoded.
func (r *Records) Columns(rows func(n int), group func(g *ColumnGroup) error) error {
	if !r.Parquet {
		return fmt.Errorf("%s: not a Parquet file", r.Path)
	}
	f, err := os.Open(r.Path)
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
		return fmt.Errorf("read parquet %s: %w", r.Path, err)
	}
	if rows != nil {
		rows(int(pf.NumRows()))
	}
	for g, rg := range pf.RowGroups() {
		if err := group(&ColumnGroup{N: int(rg.NumRows()), rg: rg, schema: pf.Schema(), path: r.Path, group: g}); err != nil {
			return err
		}
	}
	return nil
}

// A ColumnGroup is one row group of rollouts.parquet, read a column at a time: N rows.
type ColumnGroup struct {
	N      int
	rg     parquet.RowGroup
	schema *parquet.Schema
	path   string
	group  int
	buf    []parquet.Value
}

// column is the index of the leaf column at path, -1 when the file has none.
func (c *ColumnGroup) column(path ...string) int {
	if l, ok := c.schema.Lookup(path...); ok {
		return l.ColumnIndex
	}
	return -1
}

// values calls fn with each value of column c, in order.
func (c *ColumnGroup) values(col int, fn func(v parquet.Value) error) error {
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

func (c *ColumnGroup) err(col int, err error) error {
	return fmt.Errorf("read parquet %s: row group %d, column %d: %w", c.path, c.group, col, err)
}

// Scalar reads the column name, of one value a row, calling set with each row's value, in
// order. A column the file lacks (an older run's) is not read.
func (c *ColumnGroup) Scalar(name string, set func(i int, v parquet.Value)) error {
	col := c.column(name)
	if col < 0 {
		return nil
	}
	i := 0
	err := c.values(col, func(v parquet.Value) error {
		if i >= c.N {
			return c.err(col, fmt.Errorf("more values than the row group's %d rows", c.N))
		}
		set(i, v)
		i++
		return nil
	})
	if err == nil && i != c.N {
		err = c.err(col, fmt.Errorf("%d values for %d rows", i, c.N))
	}
	return err
}

// KV is an entry of a map column.
type KV struct{ K, V string }

// Map reads the map column name (its key and value leaves) and calls fn with each row that
// has entries, in order; str makes a value's text. Keys and values that repeat share one
// string. A column the file lacks is not read.
func (c *ColumnGroup) Map(name string, str func(parquet.Value) string, fn func(row int, e []KV)) error {
	keyCol, valCol := c.column(name, "key_value", "key"), c.column(name, "key_value", "value")
	if keyCol < 0 || valCol < 0 {
		return nil
	}
	type entry struct {
		row int32
		KV
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
		if i >= c.N {
			return c.err(keyCol, fmt.Errorf("more rows than the row group's %d", c.N))
		}
		if v.DefinitionLevel() > 0 {
			k, ok := seen[string(v.ByteArray())]
			if !ok {
				k = same(string(v.ByteArray()))
			}
			es = append(es, entry{row: int32(i), KV: KV{K: k}})
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
		es[j].V = same(str(v))
		j++
		return nil
	})
	if err == nil && j != len(es) {
		err = c.err(valCol, fmt.Errorf("%d values for %d keys", j, len(es)))
	}
	if err != nil {
		return err
	}
	var row []KV
	for a := 0; a < len(es); {
		b := a
		row = row[:0]
		for b < len(es) && es[b].row == es[a].row {
			row = append(row, es[b].KV)
			b++
		}
		fn(int(es[a].row), row)
		a = b
	}
	return nil
}
