package main

import (
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// CONTRIBUTING.md's table of environment variables is the one list of the ROLLOUT_ variables
// that the code, tests and scripts read: every one they name is in it, and every row names
// one of them. rollout run's ROLLOUT_<FLAG> variables are documented with the flags instead.
func TestEnvironmentDocumented(t *testing.T) {
	read := map[string][]string{} // variable: the files that name it
	name := regexp.MustCompile(`\bROLLOUT_[A-Z0-9_]*[A-Z0-9]\b`)
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		base := d.Name()
		if d.IsDir() {
			if path != "../.." && (strings.HasPrefix(base, ".") && base != ".ci" || base == "testdata" || base == "bin" || base == "out" || base == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(base, ".go") && !strings.HasSuffix(base, ".sh") && base != "Makefile" && path != filepath.Join("../..", ".ci", "run") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, v := range name.FindAllString(string(b), -1) {
			if !slices.Contains(read[v], path) {
				read[v] = append(read[v], path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The run flags' variables, and names that are not variables the code reads: a variable a
	// test sets unset on purpose, and an argument's name in a script's usage line.
	var rf runFlags
	flags, _, _ := runFlagSet(&rf, env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }})
	notRead := map[string]bool{"ROLLOUT_TEST_UNSET_KEY": true, "ROLLOUT_BINARY": true}
	for v := range read {
		if f := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(v, "ROLLOUT_"), "_", "-")); flags.Lookup(f) != nil || notRead[v] {
			delete(read, v)
		}
	}
	if len(read) < 20 {
		t.Fatalf("found %d ROLLOUT_ variables in the code, want about 20: %v", len(read), slices.Sorted(maps.Keys(read)))
	}

	documented := map[string]bool{}
	row := regexp.MustCompile("^\\| `(ROLLOUT_[A-Z0-9_]+)[=`]")
	for _, line := range strings.Split(readFile(t, "../../CONTRIBUTING.md"), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			documented[m[1]] = true
		}
	}
	for _, v := range slices.Sorted(maps.Keys(read)) {
		if !documented[v] {
			t.Errorf("%s (named in %s) is not in CONTRIBUTING.md's table of environment variables", v, strings.Join(read[v], ", "))
		}
	}
	for _, v := range slices.Sorted(maps.Keys(documented)) {
		if read[v] == nil {
			t.Errorf("CONTRIBUTING.md documents %s, which no code, test or script reads", v)
		}
	}
}
