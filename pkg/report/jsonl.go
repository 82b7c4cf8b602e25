package report

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
)

// jsonlFile is an append-only JSON Lines file: a buffered writer over a file
// opened for appending, synced on Close.
type jsonlFile struct {
	path   string
	f      *os.File
	w      *bufio.Writer
	closed bool
}

// openJSONL opens path for appending, creating it if needed. If the file
// ends in a torn line (a crash in the middle of a write), the torn tail is
// cut off so that the lines appended after it parse.
func openJSONL(path string) (*jsonlFile, error) {
	_, statErr := os.Stat(path)
	created := errors.Is(statErr, os.ErrNotExist)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	if err := trimTornLine(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if created {
		if err := syncDir(path); err != nil {
			f.Close()
			return nil, err
		}
	}
	return &jsonlFile{path: path, f: f, w: bufio.NewWriterSize(f, 256<<10)}, nil
}

// trimTornLine truncates f after its last newline.
func trimTornLine(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	if size == 0 {
		return nil
	}
	// Read backwards in blocks to find the last newline.
	const block = 64 << 10
	buf := make([]byte, block)
	end := size
	for end > 0 {
		start := max(end-block, 0)
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && !(errors.Is(err, io.EOF) && int64(n) == end-start) {
			return err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			keep := start + int64(i) + 1
			if keep == size {
				return nil
			}
			return f.Truncate(keep)
		}
		end = start
	}
	return f.Truncate(0)
}

// writeLine writes line, which must end in a newline.
func (j *jsonlFile) writeLine(line []byte) error {
	if j.closed {
		return fmt.Errorf("%s: write after close", j.path)
	}
	_, err := j.w.Write(line)
	return err
}

// Flush hands buffered lines to the operating system.
func (j *jsonlFile) Flush() error {
	if j.closed {
		return nil
	}
	return j.w.Flush()
}

// Sync flushes buffered lines and makes them durable (fsync).
func (j *jsonlFile) Sync() error {
	if j.closed {
		return nil
	}
	if err := j.w.Flush(); err != nil {
		return fmt.Errorf("%s: %w", j.path, err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("%s: %w", j.path, err)
	}
	return nil
}

// Close flushes, syncs and closes the file. Later calls do nothing.
func (j *jsonlFile) Close() error {
	if j.closed {
		return nil
	}
	j.closed = true
	err := j.w.Flush()
	if err == nil {
		err = j.f.Sync()
	}
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", j.path, err)
	}
	return nil
}

// lineBlockSize is how much of a file the line scanners read at a time: large enough that a
// 10^6-line file takes few reads and a worker has a good share of lines to parse, small
// enough that the blocks in flight (and what was parsed of them) take little memory.
const lineBlockSize = 1 << 20

// lineBlock is a block of a file's complete lines on its way through scanLines.
type lineBlock[T any] struct {
	data   []byte // the lines, each with its newline
	ends   []int  // where each line ends in data (after its newline)
	res    []T    // what parse made of each line
	parsed chan struct{}
}

// scanLines reads the complete lines of r a block at a time; worker goroutines call parse
// on the lines of a block (worker is the worker's number, below workers, for state of its
// own), and consume gets every line with what parse made of it, in order, on the calling
// goroutine. A line is given without its newline, and is only valid during the call. A
// last line without a newline (a torn write) is left out. consume's first error ends the
// scan. complete is the length of the complete lines read.
//
// The blocks in flight are bounded (a few per worker), so memory does not grow with the
// file.
func scanLines[T any](r io.Reader, workers int, parse func(worker int, line []byte, res *T), consume func(line []byte, n int, res *T) error) (complete int64, err error) {
	workers = max(workers, 1)
	free := make(chan *lineBlock[T], workers+2)
	for range cap(free) {
		free <- &lineBlock[T]{data: make([]byte, 0, lineBlockSize)}
	}
	work := make(chan *lineBlock[T], cap(free))
	ordered := make(chan *lineBlock[T], cap(free))
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
			var b *lineBlock[T]
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

// scanWorkers is how many goroutines parse lines.
func scanWorkers() int { return min(runtime.GOMAXPROCS(0), 4) }

// estimateLines estimates how many lines the file at path has, from the length of the
// lines at its start; 0 if it cannot tell.
func estimateLines(path string) int {
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
