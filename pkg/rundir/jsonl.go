package rundir

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/rollout-dev/rollout/internal/durable"
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
		if err := durable.SyncDir(path); err != nil {
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
