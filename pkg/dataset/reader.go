package dataset

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// DefaultMaxLineBytes caps one row. A longer line becomes a bad_task record
// (it is skipped, not held in memory).
const DefaultMaxLineBytes = 64 << 20

// Reader streams tasks from JSONL. Memory holds one line at a time.
type Reader struct {
	name    string
	br      *bufio.Reader
	closers []io.Closer
	gzip    bool
	line    int
	index   int
	buf     []byte
	// MaxLineBytes caps one row; 0 means DefaultMaxLineBytes.
	MaxLineBytes int
}

// Open opens path for reading: "-" is stdin, a gzip file (by magic bytes,
// whatever its name) is decompressed on the fly.
func Open(path string) (*Reader, error) {
	if path == "-" {
		return newReader(os.Stdin, "<stdin>", nil)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return nil, fmt.Errorf("%s: is a directory, want a JSONL file", path)
	}
	return newReader(f, path, f)
}

// NewReader reads tasks from r; name is used in error messages.
func NewReader(r io.Reader, name string) (*Reader, error) {
	return newReader(r, name, nil)
}

func newReader(r io.Reader, name string, c io.Closer) (*Reader, error) {
	rd := &Reader{name: name, br: bufio.NewReaderSize(r, 256<<10)}
	if c != nil {
		rd.closers = append(rd.closers, c)
	}
	if magic, _ := rd.br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(rd.br)
		if err != nil {
			rd.Close()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		rd.closers = append(rd.closers, zr)
		rd.br = bufio.NewReaderSize(zr, 256<<10)
		rd.gzip = true
	}
	// A UTF-8 byte order mark (editors on Windows write one) is not part of the first row.
	if bom, _ := rd.br.Peek(3); bytes.Equal(bom, []byte("\xef\xbb\xbf")) {
		_, _ = rd.br.Discard(3)
	}
	return rd, nil
}

// Name is the input's name as used in errors.
func (r *Reader) Name() string { return r.name }

// Close closes the underlying file (not stdin).
func (r *Reader) Close() error {
	var errs []error
	for i := len(r.closers) - 1; i >= 0; i-- {
		errs = append(errs, r.closers[i].Close())
	}
	r.closers = nil
	return errors.Join(errs...)
}

// Next returns the next task, or io.EOF after the last one. A malformed row
// is returned as a task with Err set; the returned error is only for reading
// failures (I/O, corrupt gzip), after which the input cannot go on.
func (r *Reader) Next() (*Task, error) {
	limit := r.MaxLineBytes
	if limit <= 0 {
		limit = DefaultMaxLineBytes
	}
	for {
		line, tooLong, err := r.readLine(limit)
		if err != nil && (err != io.EOF || (len(line) == 0 && !tooLong)) {
			if err != io.EOF {
				err = r.readError(err)
			}
			return nil, err
		}
		r.line++
		if tooLong {
			t := &Task{Index: r.index, File: r.name, Line: r.line}
			r.index++
			t.Err = &RowError{File: r.name, Line: r.line, Msg: fmt.Sprintf("line longer than %d bytes (the cap of one row); skipped", limit)}
			return t, nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			if err == io.EOF {
				return nil, io.EOF
			}
			continue
		}
		t := &Task{Index: r.index, File: r.name, Line: r.line}
		if cap(r.buf) > bigLine {
			// Hand a big line over rather than copy it; the next line gets a new buffer.
			t.Raw, r.buf = line[:len(line):len(line)], nil
		} else {
			t.Raw = bytes.Clone(line)
		}
		r.index++
		if ferr := t.parse(); ferr != nil {
			t.Err = &RowError{File: r.name, Line: r.line, Field: ferr.field, Msg: ferr.msg}
		}
		return t, nil
	}
}

// bigLine is the buffer size above which a line is handed to its task instead of copied.
const bigLine = 1 << 20

// readError names the file and line of a reading failure, after which the input cannot go on.
func (r *Reader) readError(err error) error {
	if r.gzip && errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%s:%d: the gzip stream is truncated (unexpected EOF): the file was cut short", r.name, r.line+1)
	}
	if r.gzip {
		return fmt.Errorf("%s:%d: corrupt gzip stream: %w", r.name, r.line+1, err)
	}
	return fmt.Errorf("%s:%d: %w", r.name, r.line+1, err)
}

// readLine reads one line without its newline into r.buf. A line longer
// than limit is consumed and reported as tooLong.
func (r *Reader) readLine(limit int) (line []byte, tooLong bool, err error) {
	r.buf = r.buf[:0]
	for {
		chunk, err := r.br.ReadSlice('\n')
		if !tooLong {
			if len(r.buf)+len(chunk) > limit+1 {
				tooLong = true
				r.buf = r.buf[:0]
			} else {
				if need := len(r.buf) + len(chunk); need > cap(r.buf) {
					// Double (append grows big slices by only 1.25x, which allocates
					// about 5 times a long line in all), up to the cap of a line.
					nb := make([]byte, len(r.buf), max(need, min(2*cap(r.buf), limit+1)))
					copy(nb, r.buf)
					r.buf = nb
				}
				r.buf = append(r.buf, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return r.buf, tooLong, err
		}
		return r.buf, tooLong, nil
	}
}

// parse parses t.Raw. Almost every row takes the single pass of parseFast; a row it does not
// accept (malformed, or unusual: escaped keys, duplicate members, nulls where values go, ...)
// is parsed again by parseCareful, which decides and words the errors.
func (t *Task) parse() *fieldError {
	if t.parseFast() {
		return nil
	}
	t.Fields, t.ID, t.AgentRef, t.Params = nil, "", nil, nil
	return t.parseCareful()
}

// parseCareful is the reference parser: encoding/json's checks, one field at a time.
func (t *Task) parseCareful() *fieldError {
	if !utf8.Valid(t.Raw) {
		off := 0
		for off < len(t.Raw) {
			rn, size := utf8.DecodeRune(t.Raw[off:])
			if rn == utf8.RuneError && size == 1 {
				break
			}
			off += size
		}
		return errf("", "invalid UTF-8 at byte %d", off)
	}
	fields, ferr := splitRow(t.Raw)
	if ferr != nil {
		return ferr
	}
	t.Fields = fields
	if raw := t.Field("id"); !isNull(raw) {
		switch jsonfast.TypeName(raw) {
		case "a string":
			_ = json.Unmarshal(raw, &t.ID)
		case "a number":
			t.ID = string(raw)
		default:
			return errf("id", "is %s, want a string or a number", jsonfast.TypeName(raw))
		}
	}
	if raw := t.Field("agent_ref"); !isNull(raw) {
		var ref AgentRef
		if jsonfast.TypeName(raw) != "an object" {
			return errf("agent_ref", "is %s, want {\"type\":..., \"name\":...}", jsonfast.TypeName(raw))
		}
		if err := json.Unmarshal(raw, &ref); err != nil {
			return typeErr("agent_ref", err)
		}
		if ref.Name == "" {
			return errf("agent_ref.name", "missing")
		}
		t.AgentRef = &ref
	}
	p, err := parseParams(t.Field(rcp))
	if err != nil {
		var fe *fieldError
		if errors.As(err, &fe) {
			return fe
		}
		return errf(rcp, "%v", err)
	}
	t.Params = p
	return nil
}

// Options select which rollouts of the input run.
type Options struct {
	// Limit keeps the first Limit tasks (0: all), of those IDs keeps.
	Limit int
	// Repeats is the number of rollouts per task (0 or 1: one).
	Repeats int
	// IDs, when not nil, keeps only the tasks whose ID (the row's "id" field) it holds.
	IDs map[string]bool
}

// Each calls fn for every (task, rollout index) of the input in order:
// with Repeats 3, task a, a, a, then b, b, b (as NeMo Gym repeats rows).
// It stops at the first error of fn or of the reader.
func Each(r *Reader, opt Options, fn func(t *Task, rolloutIndex int) error) error {
	repeats := max(opt.Repeats, 1)
	for n := 0; opt.Limit <= 0 || n < opt.Limit; n++ {
		t, err := r.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if opt.IDs != nil && !opt.IDs[t.ID] {
			n--
			continue
		}
		for k := range repeats {
			if err := fn(t, k); err != nil {
				return err
			}
		}
	}
	return nil
}

// ReadFile opens the task file at path and calls fn for each of its tasks in order, malformed
// ones included (with Err set). It stops at the first error of fn or of the reader.
func ReadFile(path string, fn func(t *Task) error) error {
	r, err := Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	return Each(r, Options{}, func(t *Task, _ int) error { return fn(t) })
}

// Count counts the tasks of a file (its non-blank lines) without parsing
// them, so that progress can show a total. It returns -1 for stdin.
func Count(path string) (int, error) {
	if path == "-" {
		return -1, nil
	}
	r, err := Open(path)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	n := 0
	blank := true
	buf := make([]byte, 256<<10)
	for {
		m, err := r.br.Read(buf)
		for _, c := range buf[:m] {
			switch c {
			case '\n':
				if !blank {
					n++
				}
				blank = true
			case ' ', '\t', '\r':
			default:
				blank = false
			}
		}
		if err == io.EOF {
			if !blank {
				n++
			}
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("%s: %w", path, err)
		}
	}
}

// Validate reads the whole input and returns every row error, up to max
// (0: all), for --strict, which refuses to start a run on a bad file.
func Validate(path string, max int) ([]*RowError, int, error) {
	r, err := Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer r.Close()
	var errs []*RowError
	n := 0
	for {
		t, err := r.Next()
		if err == io.EOF {
			return errs, n, nil
		}
		if err != nil {
			return errs, n, err
		}
		n++
		if t.Err != nil && (max <= 0 || len(errs) < max) {
			errs = append(errs, t.Err)
		}
	}
}

// FormatRowErrors joins row errors one per line, as --strict prints them.
func FormatRowErrors(errs []*RowError) string {
	var b strings.Builder
	for i, e := range errs {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}
