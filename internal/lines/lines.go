// Package lines reads a file's complete lines a block at a time, parsing them on worker
// goroutines and handing them back in order: the scanner under the run directory's journal,
// trajectories and NeMo Gym files.
package lines

import (
	"bytes"
	"errors"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
)

// BlockSize is how much of a file the line scanners read at a time: large enough that a
// 10^6-line file takes few reads and a worker has a good share of lines to parse, small
// enough that the blocks in flight (and what was parsed of them) take little memory.
const BlockSize = 1 << 20

// block is a block of a file's complete lines on its way through Scan.
type block[T any] struct {
	data   []byte // the lines, each with its newline
	ends   []int  // where each line ends in data (after its newline)
	res    []T    // what parse made of each line
	parsed chan struct{}
}

// Scan reads the complete lines of r a block at a time; worker goroutines call parse
// on the lines of a block (worker is the worker's number, below workers, for state of its
// own), and consume gets every line with what parse made of it, in order, on the calling
// goroutine. A line is given without its newline, and is only valid during the call. A
// last line without a newline (a torn write) is left out. consume's first error ends the
// scan. complete is the length of the complete lines read.
//
// The blocks in flight are bounded (a few per worker), so memory does not grow with the
// file.
func Scan[T any](r io.Reader, workers int, parse func(worker int, line []byte, res *T), consume func(line []byte, n int, res *T) error) (complete int64, err error) {
	workers = max(workers, 1)
	free := make(chan *block[T], workers+2)
	for range cap(free) {
		free <- &block[T]{data: make([]byte, 0, BlockSize)}
	}
	work := make(chan *block[T], cap(free))
	ordered := make(chan *block[T], cap(free))
	quit := make(chan struct{})
	var readErr error
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for b := range work {
				b.ends, b.res = b.ends[:0], b.res[:0]
				start := 0
				for start < len(b.data) {
					end := start + bytes.IndexByte(b.data[start:], '\n') + 1
					b.ends = append(b.ends, end)
					start = end
				}
				if cap(b.res) < len(b.ends) {
					b.res = make([]T, len(b.ends))
				}
				b.res = b.res[:len(b.ends)]
				start = 0
				for i, end := range b.ends {
					parse(w, b.data[start:end-1], &b.res[i])
					start = end
				}
				close(b.parsed)
			}
		})
	}
	// The reader: blocks cut after their last newline; the rest starts the next block.
	go func() {
		defer close(ordered)
		defer close(work)
		var carry []byte
		for {
			var b *block[T]
			select {
			case b = <-free:
			case <-quit:
				return
			}
			b.data = append(b.data[:0], carry...)
			eof := false
			for {
				if len(b.data) == cap(b.data) {
					if bytes.IndexByte(b.data, '\n') >= 0 {
						break
					}
					b.data = slices.Grow(b.data, cap(b.data)) // a line longer than a block
				}
				n, err := r.Read(b.data[len(b.data):cap(b.data)])
				b.data = b.data[:len(b.data)+n]
				if err != nil {
					if !errors.Is(err, io.EOF) {
						readErr = err
					}
					eof = true
					break
				}
			}
			cut := bytes.LastIndexByte(b.data, '\n') + 1
			carry = append(carry[:0], b.data[cut:]...)
			b.data = b.data[:cut]
			if cut > 0 {
				b.parsed = make(chan struct{})
				ordered <- b
				work <- b
			} else {
				free <- b
			}
			if eof {
				return
			}
		}
	}()
	defer func() {
		close(quit)
		for b := range ordered { // let the reader end
			<-b.parsed
		}
		wg.Wait()
		if err == nil && readErr != nil {
			err = readErr
		}
	}()
	n := 0
	for b := range ordered {
		<-b.parsed
		start := 0
		for i, end := range b.ends {
			n++
			if err := consume(b.data[start:end-1], n, &b.res[i]); err != nil {
				return complete, err
			}
			complete += int64(end - start)
			start = end
		}
		clear(b.res) // let go of what parse made
		free <- b
	}
	return complete, nil
}

// Workers is how many goroutines parse lines.
func Workers() int { return min(runtime.GOMAXPROCS(0), 4) }

// Estimate estimates how many lines the file at path has, from the length of the
// lines at its start; 0 if it cannot tell.
func Estimate(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	buf := make([]byte, 256<<10)
	n, _ := io.ReadFull(f, buf)
	lines := bytes.Count(buf[:n], []byte{'\n'})
	if lines == 0 {
		return 0
	}
	return int(st.Size() / int64(bytes.LastIndexByte(buf[:n], '\n')+1) * int64(lines))
}

// ScanHeads is Scan for files whose lines may be far longer than memory should hold: parse and
// consume get at most the first head bytes of each line (head at least 1), and consume gets the
// line's whole length (without its newline) too, so a line longer than head is its head and
// a length, never in memory whole. The rest of a long line is read and dropped as it streams.
// complete is the length of the complete lines read, as in Scan.
func ScanHeads[T any](r io.Reader, workers, head int, parse func(worker int, line []byte, res *T), consume func(line []byte, length int64, n int, res *T) error) (complete int64, err error) {
	h := &headReader{r: r, head: int64(max(head, 1)), long: map[int]int64{}}
	_, err = Scan(h, workers, parse, func(line []byte, n int, res *T) error {
		length := int64(len(line))
		h.mu.Lock()
		if l, ok := h.long[n]; ok {
			length = l
			delete(h.long, n)
		}
		h.mu.Unlock()
		if err := consume(line, length, n, res); err != nil {
			return err
		}
		complete += length + 1
		return nil
	})
	return complete, err
}

// headReader passes on r's lines with each cut after its first head bytes; the whole length
// of every line it cut is in long, by line number (from 1), until the consumer takes it.
type headReader struct {
	r     io.Reader
	head  int64
	cur   int64 // the current line's length so far
	lines int   // the lines ended so far
	mu    sync.Mutex
	long  map[int]int64
}

func (h *headReader) Read(p []byte) (int, error) {
	for {
		n, err := h.r.Read(p)
		out, data := 0, p[:n]
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			seg := data
			if i >= 0 {
				seg = data[:i]
			}
			keep := min(int64(len(seg)), max(h.head-h.cur, 0))
			out += copy(p[out:], seg[:keep]) // out is never past seg's start: a copy within p
			h.cur += int64(len(seg))
			if i < 0 {
				break
			}
			p[out] = '\n'
			out++
			h.lines++
			if h.cur > h.head {
				h.mu.Lock()
				h.long[h.lines] = h.cur
				h.mu.Unlock()
			}
			h.cur = 0
			data = data[i+1:]
		}
		if out > 0 || err != nil {
			return out, err
		}
	}
}
