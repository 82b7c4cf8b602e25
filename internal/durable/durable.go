// Package durable makes file changes survive a crash: a directory synced after a rename or
// a creation in it, and a file replaced atomically.
package durable

import (
	"errors"
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
func WriteFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
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
	if _, err = f.Write(data); err != nil {
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
