// Package extsort sorts more fixed-size values than a program keeps in memory: past a bound,
// the values in memory are sorted and written to a temporary file as a run, and the runs are
// merged when the values are read back in order.
package extsort

import (
	"bufio"
	"container/heap"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// Codec writes and reads a value as Size bytes.
type Codec[T any] struct {
	Size   int
	Encode func(b []byte, v *T)
	Decode func(b []byte, v *T)
}

// readBuffer is the read buffer of each run while they are merged: 1,000 runs take 8 MiB.
const readBuffer = 8 << 10

// Sorter holds values to be read back in order. Values are appended to Buf; when it holds Max
// of them, Spill writes them out as a sorted run. A Sorter whose file cannot be written keeps
// its values in memory from then on (Spilling is false). It is not safe for concurrent use.
type Sorter[T any] struct {
	// Buf is the values in memory, not yet in a run.
	Buf []T
	// Max is how many values Buf holds before Full is true.
	Max int

	dir   string
	codec Codec[T]
	off   bool // spilling failed or was never asked for
	f     *os.File
	path  string // the file's path while it has one (removed at Close)
	runs  []run
	size  int64
}

type run struct{ off, n int64 }

// New returns a Sorter that writes its runs to a temporary file in dir, each of max values;
// dir "" keeps every value in memory.
func New[T any](dir string, max int, c Codec[T]) *Sorter[T] {
	return &Sorter[T]{Max: max, dir: dir, codec: c, off: dir == ""}
}

// Spilling says whether the Sorter writes runs.
func (s *Sorter[T]) Spilling() bool { return !s.off }

// Runs is the number of runs written.
func (s *Sorter[T]) Runs() int { return len(s.runs) }

// Full says whether Buf should be spilled now.
func (s *Sorter[T]) Full() bool { return !s.off && len(s.Buf) >= s.Max }

// Spill sorts Buf by cmp and writes it to the file as a run, leaving Buf empty. If the file
// cannot be written, the Sorter stops spilling and Buf keeps its values.
func (s *Sorter[T]) Spill(cmp func(a, b T) int) {
	if s.off || len(s.Buf) == 0 {
		return
	}
	if s.f == nil {
		f, err := os.CreateTemp(s.dir, ".sort-*.tmp")
		if err != nil {
			s.off = true
			return
		}
		s.f, s.path = f, f.Name()
		// Unlinked at once where the system allows it, so that nothing is left if the process
		// dies.
		if os.Remove(s.path) == nil {
			s.path = ""
		}
	}
	slices.SortFunc(s.Buf, cmp)
	w := bufio.NewWriterSize(io.NewOffsetWriter(s.f, s.size), 64<<10)
	b := make([]byte, s.codec.Size)
	for i := range s.Buf {
		s.codec.Encode(b, &s.Buf[i])
		w.Write(b)
	}
	if err := w.Flush(); err != nil {
		s.off = true
		return
	}
	s.runs = append(s.runs, run{off: s.size, n: int64(len(s.Buf))})
	s.size += int64(len(s.Buf)) * int64(s.codec.Size)
	clear(s.Buf)
	s.Buf = s.Buf[:0]
}

// Each calls f with every value, in the order of cmp (the order the runs were spilled in, or
// one that agrees with it). Without runs it sorts Buf in place; with runs, Buf becomes one
// more run (or, if that cannot be written, is merged from memory) and the runs are merged.
// The values can be read again; an error is one in reading the runs back, and the values
// that f was called with are then some of them.
func (s *Sorter[T]) Each(cmp func(a, b T) int, f func(*T)) error {
	if len(s.runs) > 0 {
		s.Spill(cmp)
	}
	if len(s.runs) == 0 {
		slices.SortFunc(s.Buf, cmp)
		for i := range s.Buf {
			f(&s.Buf[i])
		}
		return nil
	}
	m := &merge[T]{cmp: cmp}
	for _, r := range s.runs {
		c := &cursor[T]{r: bufio.NewReaderSize(io.NewSectionReader(s.f, r.off, r.n*int64(s.codec.Size)), readBuffer), left: r.n, codec: &s.codec, buf: make([]byte, s.codec.Size)}
		if err := c.next(); err != nil {
			return err
		}
		m.cursors = append(m.cursors, c)
	}
	if len(s.Buf) > 0 {
		slices.SortFunc(s.Buf, cmp)
		c := &cursor[T]{mem: s.Buf, left: int64(len(s.Buf))}
		c.next()
		m.cursors = append(m.cursors, c)
	}
	heap.Init(m)
	for m.Len() > 0 {
		c := m.cursors[0]
		f(&c.v)
		if c.left == 0 {
			heap.Pop(m)
			continue
		}
		if err := c.next(); err != nil {
			return err
		}
		heap.Fix(m, 0)
	}
	return nil
}

// Close releases the temporary file, if any.
func (s *Sorter[T]) Close() error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	if s.path != "" {
		err = errors.Join(err, os.Remove(s.path))
	}
	s.f, s.path, s.runs, s.size = nil, "", nil, 0
	return err
}

// cursor reads one run back, from the file or from memory (mem).
type cursor[T any] struct {
	r     *bufio.Reader
	mem   []T
	left  int64 // values still to read
	v     T
	codec *Codec[T]
	buf   []byte
}

func (c *cursor[T]) next() error {
	if c.r == nil {
		c.v, c.mem = c.mem[0], c.mem[1:]
		c.left--
		return nil
	}
	if _, err := io.ReadFull(c.r, c.buf); err != nil {
		return fmt.Errorf("reading back a temporary file: %w", err)
	}
	c.codec.Decode(c.buf, &c.v)
	c.left--
	return nil
}

// merge is a heap of cursors by their current values.
type merge[T any] struct {
	cursors []*cursor[T]
	cmp     func(a, b T) int
}

func (m *merge[T]) Len() int           { return len(m.cursors) }
func (m *merge[T]) Less(i, j int) bool { return m.cmp(m.cursors[i].v, m.cursors[j].v) < 0 }
func (m *merge[T]) Swap(i, j int)      { m.cursors[i], m.cursors[j] = m.cursors[j], m.cursors[i] }
func (m *merge[T]) Push(x any)         { m.cursors = append(m.cursors, x.(*cursor[T])) }
func (m *merge[T]) Pop() any {
	c := m.cursors[len(m.cursors)-1]
	m.cursors = m.cursors[:len(m.cursors)-1]
	return c
}
