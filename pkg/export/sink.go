package export

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/rollout-dev/rollout/internal/durable"
	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// rowsPerGroup bounds a Parquet row group, and so what the writer holds in memory.
const rowsPerGroup = 4096

// sink writes rows of type T to a Parquet or JSONL file, chosen by the file's extension. It
// writes to a temporary file beside the output, which commit syncs and renames into place;
// abort removes it, so that a failed export leaves no partial file.
type sink[T any] struct {
	path, tmp string
	f         *os.File
	bw        *bufio.Writer
	pq        *parquet.GenericWriter[T]
	batch     []T
	rows      int
}

// fileKind is "parquet" or "jsonl" by path's extension, or an error naming it.
func fileKind(path string) (string, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".parquet":
		return "parquet", nil
	case ".jsonl", ".json", ".ndjson":
		return "jsonl", nil
	default:
		return "", fmt.Errorf("-o %s: unknown extension %q (want .parquet or .jsonl)", path, ext)
	}
}

func newSink[T any](path string) (*sink[T], error) {
	kind, err := fileKind(path)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	s := &sink[T]{path: path, tmp: f.Name(), f: f, bw: bufio.NewWriterSize(f, 1<<20)}
	if kind == "parquet" {
		s.pq = parquet.NewGenericWriter[T](s.bw, parquet.Compression(&parquet.Zstd), parquet.MaxRowsPerRowGroup(rowsPerGroup))
		s.batch = make([]T, 0, 256)
	}
	return s, nil
}

func (s *sink[T]) write(row *T) error {
	s.rows++
	if s.pq == nil {
		b, err := jsonfast.Marshal(row)
		if err != nil {
			return err
		}
		s.bw.Write(b)
		return s.bw.WriteByte('\n')
	}
	s.batch = append(s.batch, *row)
	if len(s.batch) == cap(s.batch) {
		return s.flushBatch()
	}
	return nil
}

func (s *sink[T]) flushBatch() error {
	if len(s.batch) == 0 {
		return nil
	}
	_, err := s.pq.Write(s.batch)
	clear(s.batch)
	s.batch = s.batch[:0]
	return err
}

// commit finishes the file and moves it to its path.
func (s *sink[T]) commit() error {
	if s.pq != nil {
		if err := s.flushBatch(); err != nil {
			return s.fail(err)
		}
		if err := s.pq.Close(); err != nil {
			return s.fail(err)
		}
	}
	if err := s.bw.Flush(); err != nil {
		return s.fail(err)
	}
	if err := s.f.Sync(); err != nil {
		return s.fail(err)
	}
	if err := s.f.Close(); err != nil {
		return s.fail(err)
	}
	if err := os.Rename(s.tmp, s.path); err != nil {
		os.Remove(s.tmp)
		return err
	}
	return durable.SyncDir(s.path)
}

func (s *sink[T]) fail(err error) error {
	s.abort()
	return fmt.Errorf("%s: %w", s.path, err)
}

// abort removes the temporary file.
func (s *sink[T]) abort() {
	s.f.Close()
	os.Remove(s.tmp)
}
