// Package durable makes file changes survive a crash: a directory synced after a rename or
// a creation in it, and a file replaced atomically.
package durable

import (
	"bufio"
	"errors"
	"io"
	"os"
	"path/filepath"
)

// SyncDir fsyncs the directory holding path, so that a rename or a file
// creation in it survives a crash.
func SyncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// WriteFileAtomic writes data to path+".tmp", syncs it and renames it to
// path, then syncs the directory. On error the temporary file is removed.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return WriteAtomic(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteAtomic is WriteFileAtomic for content written by write, through a
// buffer, so that a large file need not be held in memory whole.
func WriteAtomic(path string, perm os.FileMode, write func(w io.Writer) error) (err error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<16)
	if err = write(bw); err == nil {
		err = bw.Flush()
	}
	if err != nil {
		f.Close()
		return err
	}
	if err = f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	return SyncDir(path)
}
