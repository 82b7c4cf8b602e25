package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The attack table: hostile inputs, one row each, and what the command given them must do. Every
// row is a break an attack run found (or a hold it confirmed); each was written to fail on the
// code before its fix. RELIABILITY.md ("The second attack run") lists the rows with their
// results. A row gets a fresh copy of a small finished run (attackFixture) in its own directory,
// builds its hostile input there, runs one command through the CLI's run function, and checks
// the exit code, a line of stderr and, in check, what must hold afterwards (for most rows: that
// every input is unchanged).
type attack struct {
	name string
	// args builds the hostile input inside f.dir and returns the command line.
	args func(t *testing.T, f *attackFixture) []string
	// exit is the exit code the command must give.
	exit int
	// stderr is a substring that stderr must hold ("" for no check).
	stderr string
	// check, when set, checks what must hold after the command (outputs, inputs unchanged).
	check func(t *testing.T, f *attackFixture, r result)
}

// attackFixture is one row's working directory: a finished run of 6 extraction tasks × 2
// repeats (arms single and multi) against the simulator, and its task file.
type attackFixture struct {
	dir   string // the row's own temporary directory
	run   string // dir/run: the finished run
	tasks string // dir/tasks.jsonl: the run's --input
	// sums holds the SHA-256 of every file under dir when the fixture was made, so that a row
	// can check that no input changed (unchanged).
	sums map[string]string
}

var attacks = []attack{
	// ---- Outputs that overwrite inputs: one rule for every command that writes ----
	{
		name: "run --out equal to its --input",
		args: func(t *testing.T, f *attackFixture) []string {
			return []string{"run", "--input", f.tasks, "--out", f.tasks, "--model-url", "builtin:sim", "--server", "builtin:extraction", "--quiet"}
		},
		exit:  2,
		check: func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},

	// ---- merge trusts what a shard says ----

	// ---- Values from the network taken unchecked ----

	// ---- Viewer and local servers ----

	// ---- Fleet and config ----
}

func TestAttacks(t *testing.T) {
	base := attackBase(t)
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			f := base.copy(t)
			args := a.args(t, f)
			r := runCLI(t, context.Background(), nil, args...)
			if r.code != a.exit {
				t.Errorf("rollout %s: exit %d, want %d\nstderr: %s", strings.Join(args, " "), r.code, a.exit, r.stderr)
			}
			if a.stderr != "" && !strings.Contains(r.stderr, a.stderr) {
				t.Errorf("rollout %s: stderr does not say %q:\n%s", strings.Join(args, " "), a.stderr, r.stderr)
			}
			if a.check != nil {
				a.check(t, f, r)
			}
		})
	}
}

var (
	attackBaseOnce sync.Once
	attackBaseDir  string
	attackBaseErr  string
)

// attackBase makes the finished run that every row copies, once per test binary.
func attackBase(t *testing.T) *attackFixture {
	t.Helper()
	attackBaseOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rollout-attack-base-")
		if err != nil {
			attackBaseErr = err.Error()
			return
		}
		attackBaseDir = dir
		tasks := filepath.Join(dir, "tasks.jsonl")
		lines := strings.SplitAfter(readFile(t, extractionData), "\n")
		if err := os.WriteFile(tasks, []byte(strings.Join(lines[:6], "")), 0o644); err != nil {
			attackBaseErr = err.Error()
			return
		}
		r := runCLI(t, context.Background(), nil, "run", "--input", tasks, "--out", filepath.Join(dir, "run"),
			"--model-url", "builtin:sim", "--server", "builtin:extraction", "--arms", "single,multi",
			"--num-repeats", "2", "--quiet")
		if r.code != 0 {
			attackBaseErr = "the base run: exit " + r.stderr
			return
		}
		if n := len(readRecords(t, filepath.Join(dir, "run"))); n != 24 {
			attackBaseErr = "the base run: " + strconv.Itoa(n) + " records, want 24"
		}
	})
	if attackBaseErr != "" {
		t.Fatal(attackBaseErr)
	}
	return &attackFixture{dir: attackBaseDir, run: filepath.Join(attackBaseDir, "run"), tasks: filepath.Join(attackBaseDir, "tasks.jsonl")}
}

// copy gives a row its own copy of the base run and task file, and records their hashes.
func (b *attackFixture) copy(t *testing.T) *attackFixture {
	t.Helper()
	dir := t.TempDir()
	err := filepath.WalkDir(b.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(b.dir, path)
		dst := filepath.Join(dir, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if d.Name() == ".lock" {
			return nil
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, src); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &attackFixture{dir: dir, run: filepath.Join(dir, "run"), tasks: filepath.Join(dir, "tasks.jsonl")}
	f.sums = f.hashes(t)
	return f
}

// hashes returns the SHA-256 of every regular file under f.dir, by path relative to it.
func (f *attackFixture) hashes(t *testing.T) map[string]string {
	t.Helper()
	sums := map[string]string{}
	err := filepath.WalkDir(f.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() || d.Name() == ".lock" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		s := sha256.Sum256(b)
		rel, _ := filepath.Rel(f.dir, path)
		sums[rel] = hex.EncodeToString(s[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

// unchanged checks that every file the fixture had is still there with the same bytes (new files
// are allowed: a row checks its outputs itself).
func (f *attackFixture) unchanged(t *testing.T) {
	t.Helper()
	now := f.hashes(t)
	for path, sum := range f.sums {
		switch got, ok := now[path]; {
		case !ok:
			t.Errorf("%s was removed", path)
		case got != sum:
			t.Errorf("%s was changed", path)
		}
	}
}
