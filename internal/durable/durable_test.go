package durable

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteFileAtomic replaces a file whole and leaves no temporary file, on success or failure.
func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "summary.json")
	for _, data := range []string{"first\n", "second, longer\n"} {
		if err := WriteFileAtomic(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != data {
			t.Fatalf("read %q, %v; want %q", got, err, data)
		}
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
	// A rename over a directory fails: the old directory stays, the temporary file goes.
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(sub, []byte("x"), 0o644); err == nil {
		t.Error("rename over a non-empty directory: no error")
	}
	if _, err := os.Stat(sub + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left after a failure: %v", err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, "missing", "f"), []byte("x"), 0o644); err == nil {
		t.Error("missing directory: no error")
	}
	if err := SyncDir(filepath.Join(dir, "missing", "f")); err == nil {
		t.Error("SyncDir of a missing directory: no error")
	}
}
