package report

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

// DefaultRowGroupSize is the number of rows per Parquet row group when
// ParquetOptions.RowGroupSize is not set.
const DefaultRowGroupSize = 100_000

// ParquetOptions configures a ParquetWriter. The zero value is usable.
type ParquetOptions struct {
	// RowGroupSize is the most rows a row group holds; a row group is
	// flushed when it is reached. Zero or less means DefaultRowGroupSize.
	// Rows of the open row group are held in memory, so this bounds the
	// writer's memory.
	RowGroupSize int
}

// ParquetWriter streams records into a zstd-compressed Parquet file
// (DESIGN §6). It writes to path+".tmp" and renames the file to path only
// when Close succeeds, so that path never holds a partial file.
type ParquetWriter struct {
	path    string
	tmp     string
	f       *os.File
	buf     *bufio.Writer
	w       *parquet.GenericWriter[Record]
	limit   int
	inGroup int // rows in the open row group
	rows    int64
	one     [1]Record
	closed  bool
	err     error // first write error; sticky
}

var _ Output = (*ParquetWriter)(nil)

// NewParquetWriter creates path+".tmp" (truncating it) and returns a writer
// that turns it into path on Close.
func NewParquetWriter(path string, opt ParquetOptions) (*ParquetWriter, error) {
	limit := opt.RowGroupSize
	if limit <= 0 {
		limit = DefaultRowGroupSize
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("parquet output: %w", err)
	}
	buf := bufio.NewWriterSize(f, 1<<20)
	w := parquet.NewGenericWriter[Record](buf,
		parquet.Compression(&zstd.Codec{}),
		parquet.MaxRowsPerRowGroup(int64(limit)),
		parquet.CreatedBy("rollout", "", ""),
	)
	return &ParquetWriter{path: path, tmp: tmp, f: f, buf: buf, w: w, limit: limit}, nil
}

// Path is the final path of the file, valid after a successful Close.
func (p *ParquetWriter) Path() string { return p.path }

// Rows is the number of records written so far.
func (p *ParquetWriter) Rows() int64 { return p.rows }

// Timestamps that parquet-go can read back: it turns milliseconds into
// nanoseconds in an int64, which overflows outside these years.
var (
	minStartedAt = time.Unix(0, math.MinInt64).Add(time.Millisecond).Truncate(time.Millisecond)
	maxStartedAt = time.Unix(0, math.MaxInt64).Truncate(time.Millisecond)
)

// Write adds the result's record as one row. A record whose StartedAt is
// neither zero (written as null) nor within the years 1678 to 2262 is
// refused with an error; the writer stays usable.
func (p *ParquetWriter) Write(r *Result) error {
	if p.closed {
		return errors.New("parquet output: write after close")
	}
	if p.err != nil {
		return p.err
	}
	if t := r.Record.StartedAt; !t.IsZero() && (t.Before(minStartedAt) || t.After(maxStartedAt)) {
		return fmt.Errorf("parquet output: task %d rollout %d: started_at %v out of range",
			r.Record.TaskIndex, r.Record.RolloutIndex, t)
	}
	p.one[0] = r.Record
	_, err := p.w.Write(p.one[:])
	p.one[0] = Record{} // do not keep the caller's maps and slices alive
	if err != nil {
		p.err = fmt.Errorf("parquet output %s: %w", p.tmp, err)
		return p.err
	}
	p.rows++
	if p.inGroup++; p.inGroup >= p.limit {
		if err := p.w.Flush(); err != nil {
			p.err = fmt.Errorf("parquet output %s: flush row group: %w", p.tmp, err)
			return p.err
		}
		p.inGroup = 0
	}
	return nil
}

// Close writes the footer, syncs the file, renames it to its final path and
// syncs the directory. If anything fails, or a Write failed before, the
// temporary file is removed, the final path is left alone and an error is
// returned. Close is idempotent after the first call returns.
func (p *ParquetWriter) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	err := p.err
	if err == nil {
		err = p.finish()
	}
	if err != nil {
		p.f.Close()
		os.Remove(p.tmp)
		return err
	}
	return nil
}

func (p *ParquetWriter) finish() error {
	if err := p.w.Close(); err != nil {
		return fmt.Errorf("parquet output %s: close writer: %w", p.tmp, err)
	}
	if err := p.buf.Flush(); err != nil {
		return fmt.Errorf("parquet output %s: %w", p.tmp, err)
	}
	if err := p.f.Sync(); err != nil {
		return fmt.Errorf("parquet output %s: sync: %w", p.tmp, err)
	}
	if err := p.f.Close(); err != nil {
		return fmt.Errorf("parquet output %s: %w", p.tmp, err)
	}
	if err := os.Rename(p.tmp, p.path); err != nil {
		return fmt.Errorf("parquet output: %w", err)
	}
	if err := syncDir(p.path); err != nil {
		return fmt.Errorf("parquet output: sync directory: %w", err)
	}
	return nil
}

// ReadParquet reads every record of a Parquet file written by ParquetWriter
// (or any file whose columns match Record's by name).
func ReadParquet(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("read parquet %s: %w", path, err)
	}
	r := parquet.NewGenericReader[Record](pf)
	defer r.Close()
	out := make([]Record, 0, r.NumRows())
	batch := make([]Record, 256)
	for {
		n, err := r.Read(batch)
		out = append(out, batch[:n]...)
		clear(batch[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read parquet %s: %w", path, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("read parquet %s: reader made no progress", path)
		}
	}
	return out, nil
}
