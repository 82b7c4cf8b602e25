package record

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/zstd"

	kzstd "github.com/klauspost/compress/zstd"

	"github.com/rollout-dev/rollout/internal/durable"
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
// (one row per record, one column per field). It writes to path+".tmp" and renames the file to path only
// when Close succeeds, so that path never holds a partial file.
//
// The file's columns are Record's (recordSchema: the strings that repeat
// are dictionary-encoded), but rows do not go through parquet-go's
// reflection, which cost most of the time, on the two map columns. Write copies the record into a batch of
// parquetBatch rows; a full batch is written a column at a time (values
// built in one tight loop per column and handed to the column's writer),
// by a few goroutines that each own a fixed set of columns, while Write
// fills the next batch. A row group ends with its pages flushed by those
// goroutines too, so that compression runs in parallel.
//
// Write keeps the record (its maps, slices and strings) until its batch is
// written, at most two batches later; the caller must not modify them
// after Write. Close must be called to release the goroutines.
type ParquetWriter struct {
	path    string
	tmp     string
	f       *os.File
	buf     *bufio.Writer
	w       *parquet.Writer
	cols    []*parquet.ColumnWriter
	limit   int
	inGroup int // rows handed to the column writers in the open row group
	rows    int64
	cur     *pqBatch   // the batch Write fills
	pending []*pqBatch // batches handed to the workers, oldest first
	free    []*pqBatch
	workers []*pqWorker
	codec   *pageCodec
	closed  bool
	err     error // first write error; sticky
}

// parquetBatch is how many rows are written to the columns at a time.
const parquetBatch = 1024

// maxParquetWorkers bounds the goroutines that write columns (fewer on fewer cores).
const maxParquetWorkers = 4

// pqBatch is a batch of rows on its way to the column writers.
type pqBatch struct {
	recs []Record
	end  bool // the last batch of its row group: flush the pages
	wg   sync.WaitGroup
	errs []error // by worker
}

// pqWorker writes some fields of every batch: their values, built into
// scratch slices, go to their columns' writers.
type pqWorker struct {
	fields []int
	jobs   chan *pqBatch
	vals   []parquet.Value // scratch
	vals2  []parquet.Value // scratch: map values
	kvs    []pqKV          // scratch: a map's entries, sorted
}

type pqKV struct {
	k  string
	vf float64
	vs string
}

// recordSchema is the schema of the file: Record's columns, the strings
// that repeat (arms, models, tool names, map keys, …) dictionary-encoded.
var recordSchema = parquet.SchemaOf(parquetRecord{})

// parquetRecord is Record with the encodings of its Parquet columns. Its
// schema is Record's (same names, types and logical types); only how
// values are encoded in the pages differs.
type parquetRecord struct {
	TaskIndex        int64              `parquet:"task_index"`
	RolloutIndex     int64              `parquet:"rollout_index"`
	TaskID           string             `parquet:"task_id"`
	TaskHash         string             `parquet:"task_hash"`
	Arm              string             `parquet:"arm,dict"`
	Agent            string             `parquet:"agent,dict"`
	Model            string             `parquet:"model,dict"`
	Endpoint         string             `parquet:"endpoint,dict"`
	Reward           float64            `parquet:"reward"`
	HasReward        bool               `parquet:"has_reward"`
	RewardComponents map[string]float64 `parquet:"reward_components" parquet-key:",dict"`
	Rounds           int32              `parquet:"rounds"`
	ToolCalls        int32              `parquet:"tool_calls"`
	ToolNames        []string           `parquet:"tool_names,list" parquet-element:",dict"`
	ToolErrors       int32              `parquet:"tool_errors"`
	PromptTokens     int64              `parquet:"prompt_tokens"`
	CompletionTokens int64              `parquet:"completion_tokens"`
	LatencyMs        float64            `parquet:"latency_ms"`
	Termination      string             `parquet:"termination,dict"`
	FailureClass     string             `parquet:"failure_class,dict"`
	Error            string             `parquet:"error"`
	Attempts         int32              `parquet:"attempts"`
	StartedAt        time.Time          `parquet:"started_at,optional,timestamp(millisecond)"`
	Seed             int64              `parquet:"seed"`
	SourceFile       string             `parquet:"source_file,dict"`
	SourceLine       int64              `parquet:"source_line"`

	Context                string  `parquet:"context,dict"`
	ContextTokens          []int64 `parquet:"context_tokens,list"`
	ContextTokensMax       int64   `parquet:"context_tokens_max"`
	ContextRemovedMessages int32   `parquet:"context_removed_messages"`
	ContextRemovedBytes    int64   `parquet:"context_removed_bytes"`
	BriefingCalls          int32   `parquet:"briefing_calls"`

	TaskFields map[string]string `parquet:"task_fields" parquet-key:",dict" parquet-value:",dict"`
}

func init() {
	if !parquet.EqualNodes(recordSchema, parquet.SchemaOf(Record{})) {
		panic("report: parquetRecord's schema is not Record's")
	}
	cols := recordSchema.Columns()
	if len(cols) != numRecordColumns {
		panic(fmt.Sprintf("report: Record has %d parquet columns", len(cols)))
	}
	for f := range numRecordFields {
		if c, _ := recordSchema.Lookup(cols[recordFields[f].column]...); c.ColumnIndex != recordFields[f].column {
			panic(fmt.Sprintf("report: parquet column %v has index %d, not %d", cols[recordFields[f].column], c.ColumnIndex, recordFields[f].column))
		}
	}
	checkValueLayout()
}

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
	n := max(1, min(runtime.GOMAXPROCS(0), maxParquetWorkers))
	codec, err := newPageCodec(n)
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("parquet output: %w", err)
	}
	w := parquet.NewWriter(buf,
		recordSchema,
		parquet.Compression(codec),
		parquet.DictionaryMaxBytes(1<<20),
		parquet.MaxRowsPerRowGroup(int64(limit)),
		parquet.CreatedBy("rollout", "", ""),
	)
	p := &ParquetWriter{path: path, tmp: tmp, f: f, buf: buf, w: w, cols: w.ColumnWriters(), limit: limit, codec: codec}
	// The fields, most costly first, each to the least loaded worker.
	p.workers = make([]*pqWorker, n)
	load := make([]int, n)
	for i := range p.workers {
		p.workers[i] = &pqWorker{}
	}
	order := make([]int, numRecordFields)
	for f := range order {
		order[f] = f
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(recordFields[b].cost, recordFields[a].cost) })
	for _, f := range order {
		i := slices.Index(load, slices.Min(load))
		p.workers[i].fields = append(p.workers[i].fields, f)
		load[i] += recordFields[f].cost + 1
	}
	if n > 1 {
		for i, wk := range p.workers {
			jobs := make(chan *pqBatch, 2)
			wk.jobs = jobs
			go func() {
				for b := range jobs {
					b.errs[i] = wk.write(p.cols, b)
					b.wg.Done()
				}
			}()
		}
	}
	return p, nil
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
// refused with an error; the writer stays usable. An error in writing the
// rows may be returned by a later Write or by Close.
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
	if p.cur == nil {
		p.cur = p.batch()
	}
	p.cur.recs = append(p.cur.recs, r.Record)
	p.rows++
	if n := len(p.cur.recs); n == parquetBatch || p.inGroup+n >= p.limit {
		return p.dispatch()
	}
	return nil
}

func (p *ParquetWriter) batch() *pqBatch {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		return b
	}
	return &pqBatch{recs: make([]Record, 0, min(parquetBatch, p.limit)), errs: make([]error, len(p.workers))}
}

// dispatch hands the current batch to the workers. While the next batch
// fills, one batch at most is being written; the last batch of a row group
// is waited for, and the row group written out.
func (p *ParquetWriter) dispatch() error {
	b := p.cur
	p.cur = nil
	if b == nil || len(b.recs) == 0 {
		return p.err
	}
	p.inGroup += len(b.recs)
	b.end = p.inGroup >= p.limit
	if len(p.workers) == 1 {
		b.errs[0] = p.workers[0].write(p.cols, b)
	} else {
		b.wg.Add(len(p.workers))
		for _, wk := range p.workers {
			wk.jobs <- b
		}
	}
	p.pending = append(p.pending, b)
	if err := p.await(b.end); err != nil {
		return err
	}
	if b.end {
		if err := p.w.Flush(); err != nil {
			p.err = fmt.Errorf("parquet output %s: flush row group: %w", p.tmp, err)
			return p.err
		}
		p.inGroup = 0
	}
	return nil
}

// await waits for the pending batches but one, or all, and frees them.
func (p *ParquetWriter) await(all bool) error {
	for len(p.pending) > 1 || all && len(p.pending) > 0 {
		b := p.pending[0]
		p.pending = p.pending[1:]
		b.wg.Wait()
		for i, err := range b.errs {
			if err != nil && p.err == nil {
				p.err = fmt.Errorf("parquet output %s: %w", p.tmp, err)
			}
			b.errs[i] = nil
		}
		clear(b.recs) // do not keep the records' maps, slices and strings alive
		b.recs = b.recs[:0]
		p.free = append(p.free, b)
	}
	return p.err
}

// stop ends the workers, once every batch is written.
func (p *ParquetWriter) stop() {
	p.await(true)
	if len(p.workers) > 1 {
		for _, wk := range p.workers {
			if wk.jobs != nil {
				close(wk.jobs)
				wk.jobs = nil
			}
		}
	}
}

// write writes the worker's fields of a batch, and flushes their pages at
// the end of a row group.
func (wk *pqWorker) write(cols []*parquet.ColumnWriter, b *pqBatch) error {
	for _, f := range wk.fields {
		if err := wk.writeField(cols, f, b.recs); err != nil {
			return err
		}
		if b.end {
			c := recordFields[f].column
			if err := cols[c].Flush(); err != nil {
				return err
			}
			if k := recordFields[f].kind; k == kindFloatMap || k == kindStringMap {
				if err := cols[c+1].Flush(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// put writes a batch's values of column c.
func put(cols []*parquet.ColumnWriter, c int, v []parquet.Value, rows int) error {
	n, err := cols[c].WriteRowValues(v)
	clear(v) // do not keep the strings alive
	if err == nil && n != rows {
		err = fmt.Errorf("column %d: %d rows written of %d", c, n, rows)
	}
	return err
}

// pqBytes is a BYTE_ARRAY value of s's bytes, not copied: the column
// buffers copy them.
func pqBytes(s string) parquet.Value {
	return parquet.ByteArrayValue(unsafe.Slice(unsafe.StringData(s), len(s)))
}

// writeField writes a batch's values of one field: a value per row in
// required columns, whose levels are (0, 0), those of a new value (the
// column writers do not look at the values' column index). An empty map
// or list is a null at definition level 0; entries have definition level
// 1, and repetition level 0 for the first of a row, 1 for the others. Map
// entries go in key order, as parquet-go writes them.
func (wk *pqWorker) writeField(cols []*parquet.ColumnWriter, f int, recs []Record) error {
	fd := &recordFields[f]
	c := fd.column
	v := slices.Grow(wk.vals[:0], len(recs))
	defer func() { wk.vals = v[:0] }()
	switch fd.kind {
	case kindInt64:
		v = v[:len(recs)]
		for i := range recs {
			v[i] = parquet.Int64Value(*(*int64)(at(&recs[i], fd.off)))
		}
	case kindInt32:
		v = v[:len(recs)]
		for i := range recs {
			v[i] = parquet.Int32Value(*(*int32)(at(&recs[i], fd.off)))
		}
	case kindFloat:
		v = v[:len(recs)]
		for i := range recs {
			v[i] = parquet.DoubleValue(*(*float64)(at(&recs[i], fd.off)))
		}
	case kindBool:
		v = v[:len(recs)]
		for i := range recs {
			v[i] = parquet.BooleanValue(*(*bool)(at(&recs[i], fd.off)))
		}
	case kindString, kindName:
		v = v[:len(recs)]
		for i := range recs {
			v[i] = pqBytes(*(*string)(at(&recs[i], fd.off)))
		}
	case kindTime:
		// Optional: null for a zero time, else milliseconds since the epoch,
		// as parquet-go writes a time.Time to a timestamp(millisecond) column.
		for i := range recs {
			if t := (*time.Time)(at(&recs[i], fd.off)); t.IsZero() {
				v = append(v, parquet.NullValue())
			} else {
				v = append(v, withLevels(parquet.Int64Value(t.UnixMilli()), 0, 1, c))
			}
		}
	case kindInt64s:
		for i := range recs {
			xs := *(*[]int64)(at(&recs[i], fd.off))
			if len(xs) == 0 {
				v = append(v, parquet.NullValue())
			}
			for j, x := range xs {
				v = append(v, withLevels(parquet.Int64Value(x), min(j, 1), 1, c))
			}
		}
	case kindStrings:
		for i := range recs {
			names := *(*[]string)(at(&recs[i], fd.off))
			if len(names) == 0 {
				v = append(v, parquet.NullValue())
			}
			for j, name := range names {
				v = append(v, withLevels(pqBytes(name), min(j, 1), 1, c))
			}
		}
	case kindFloatMap, kindStringMap:
		v2 := wk.vals2[:0]
		defer func() { wk.vals2 = v2[:0] }()
		for i := range recs {
			kvs := wk.kvs[:0]
			if fd.kind == kindFloatMap {
				for k, x := range *(*map[string]float64)(at(&recs[i], fd.off)) {
					kvs = append(kvs, pqKV{k: k, vf: x})
				}
			} else {
				for k, x := range *(*map[string]string)(at(&recs[i], fd.off)) {
					kvs = append(kvs, pqKV{k: k, vs: x})
				}
			}
			// Insertion sort: maps here have a few entries.
			for a := 1; a < len(kvs); a++ {
				for b := a; b > 0 && kvs[b].k < kvs[b-1].k; b-- {
					kvs[b], kvs[b-1] = kvs[b-1], kvs[b]
				}
			}
			if len(kvs) == 0 {
				v = append(v, parquet.NullValue())
				v2 = append(v2, parquet.NullValue())
			}
			for j := range kvs {
				rep := min(j, 1)
				v = append(v, withLevels(pqBytes(kvs[j].k), rep, 1, c))
				if fd.kind == kindFloatMap {
					v2 = append(v2, withLevels(parquet.DoubleValue(kvs[j].vf), rep, 1, c+1))
				} else {
					v2 = append(v2, withLevels(pqBytes(kvs[j].vs), rep, 1, c+1))
				}
			}
			clear(kvs)
			wk.kvs = kvs[:0]
		}
		if err := put(cols, c+1, v2, len(recs)); err != nil {
			return err
		}
	}
	return put(cols, c, v, len(recs))
}

// valueLayout mirrors parquet.Value, so that withLevels can set a value's
// levels without calling Value.Level, which is not inlined and was a fifth
// of the time spent on the map and list columns. checkValueLayout, run by
// init, makes sure that the mirror is right: a version of parquet-go that
// changes Value's layout stops the program at once (and its tests), rather
// than writing wrong levels.
type valueLayout struct {
	ptr             *byte
	u64             uint64
	kind            int8
	definitionLevel byte
	repetitionLevel byte
	columnIndex     uint16
}

func checkValueLayout() {
	ok := unsafe.Sizeof(parquet.Value{}) == unsafe.Sizeof(valueLayout{})
	b := []byte("xy")
	for _, v := range []parquet.Value{parquet.Int64Value(-7), parquet.DoubleValue(0.5), parquet.ByteArrayValue(b), parquet.NullValue()} {
		for _, l := range [][3]int{{0, 0, 0}, {0, 1, 3}, {1, 1, 26}, {1, 0, 9}} {
			if !ok {
				break
			}
			want := v.Level(l[0], l[1], l[2])
			got := withLevels(v, l[0], l[1], l[2])
			ok = got == want && got.RepetitionLevel() == l[0] && got.DefinitionLevel() == l[1] && got.Column() == l[2]
		}
	}
	if !ok {
		panic("report: parquet.Value's layout is not the one withLevels knows (a new parquet-go?): update valueLayout")
	}
}

// withLevels is v.Level(rep, def, col), for levels and a column index in
// range.
func withLevels(v parquet.Value, rep, def, col int) parquet.Value {
	m := (*valueLayout)(unsafe.Pointer(&v))
	m.repetitionLevel = byte(rep)
	m.definitionLevel = byte(def)
	m.columnIndex = ^uint16(col)
	return v
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
	p.stop()
	p.codec.enc.Close()
	if err != nil {
		p.f.Close()
		os.Remove(p.tmp)
		return err
	}
	return nil
}

func (p *ParquetWriter) finish() error {
	if err := p.dispatch(); err != nil {
		return err
	}
	p.stop()
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
	if err := durable.SyncDir(p.path); err != nil {
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

// pageCodec is the ZSTD codec of a writer's pages: parquet-go's ZSTD (the same frames,
// which any reader decodes), but with an encoder of its own, as many streams as the writer
// has workers, and a window of 1 MB, the most a page holds (parquet-go's codec has
// encoders of an 8 MB window each in a pool, which remakes them after a garbage
// collection: a third of the heap of a 10^6-record Finalize, and a lot of zeroing).
type pageCodec struct {
	enc        *kzstd.Encoder
	zstd.Codec // the name, the format code, and Decode
}

func newPageCodec(streams int) (*pageCodec, error) {
	enc, err := kzstd.NewWriter(nil,
		kzstd.WithEncoderLevel(kzstd.SpeedFastest),
		kzstd.WithEncoderConcurrency(streams),
		kzstd.WithWindowSize(1<<20),
		kzstd.WithZeroFrames(true),
		kzstd.WithEncoderCRC(false),
	)
	if err != nil {
		return nil, err
	}
	return &pageCodec{enc: enc}, nil
}

var _ compress.Codec = (*pageCodec)(nil)

func (c *pageCodec) Encode(dst, src []byte) ([]byte, error) {
	return c.enc.EncodeAll(src, dst[:0]), nil
}
