package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// taskIDs is the sorted set of the row ids of dir's records.
func recordTaskIDs(t *testing.T, dir string) []string {
	t.Helper()
	var ids []string
	seen := map[string]bool{}
	for _, rec := range readRecords(t, dir) {
		if !seen[rec.TaskID] {
			seen[rec.TaskID] = true
			ids = append(ids, rec.TaskID)
		}
	}
	return ids
}

// --limit 0.1 runs the first 10% of the tasks (rounded up), says how many on stderr, and a
// resume keeps that selection; --sample-id runs the rows with those ids, in file order, and the
// two combine (the limit counts the picked rows).
func TestLimitFractionAndSampleIDs(t *testing.T) {
	input := headLines(t, extractionData, 25)
	base := []string{"run", "--input", input, "--model-url", "builtin:sim", "--server", "builtin:extraction", "--quiet"}
	cases := []struct {
		args    []string
		want    []string
		message string
	}{
		{[]string{"--limit", "0.1"}, []string{"extraction-0001", "extraction-0002", "extraction-0003"}, "--limit 0.1: the first 3 of 25 tasks"},
		{[]string{"--limit", "0.04"}, []string{"extraction-0001"}, "--limit 0.04: the first 1 of 25 tasks"},
		{[]string{"--sample-id", "extraction-0020,extraction-0004", "--sample-id", "extraction-0011"}, []string{"extraction-0004", "extraction-0011", "extraction-0020"}, ""},
		{[]string{"--sample-id", "extraction-0020,extraction-0004,extraction-0011", "--limit", "0.5"}, []string{"extraction-0004", "extraction-0011"}, "--limit 0.5: the first 2 of 3 tasks"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		r := runCLI(t, context.Background(), nil, append(append(base, "--out", dir), c.args...)...)
		if r.code != 0 {
			t.Fatalf("%q: exit %d: %s", c.args, r.code, r.stderr)
		}
		if got := recordTaskIDs(t, dir); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: tasks %q, want %q", c.args, got, c.want)
		}
		if !strings.Contains(r.stderr, c.message) {
			t.Errorf("%q: stderr %q, want %q", c.args, r.stderr, c.message)
		}
		// The manifest keeps the selection: a resume with nothing but --out is not refused and
		// runs nothing more.
		r = runCLI(t, context.Background(), nil, "run", "--resume", "--out", dir, "--quiet")
		if r.code != 0 {
			t.Fatalf("%q: resume: exit %d: %s", c.args, r.code, r.stderr)
		}
		if got := recordTaskIDs(t, dir); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: after the resume, tasks %q, want %q", c.args, got, c.want)
		}
	}
}

// Bad selections are usage errors that name the field and the ids.
func TestSelectionRefused(t *testing.T) {
	input := headLines(t, extractionData, 5)
	noIDs := filepath.Join(t.TempDir(), "noids.jsonl")
	data, _ := os.ReadFile(input)
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var row map[string]json.RawMessage
		json.Unmarshal([]byte(line), &row)
		delete(row, "id")
		out, _ := json.Marshal(row)
		b.Write(append(out, '\n'))
	}
	os.WriteFile(noIDs, []byte(b.String()), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--input", input, "--sample-id", "extraction-0002,nope,extraction-9999"}, `--sample-id: no row of ` + input + ` has "id" "extraction-9999", "nope" (5 of its 5 rows have an id)`},
		{[]string{"--input", noIDs, "--sample-id", "x"}, `no row of ` + noIDs + ` has an "id" field (--sample-id picks rows by their top-level "id")`},
		{[]string{"--input", input, "--sample-id", "a,,b"}, `an empty id`},
		{[]string{"--input", input, "--limit", "1.5"}, `want a number of tasks (10) or a fraction in (0, 1)`},
		{[]string{"--input", input, "--limit", "-3"}, `want a number of tasks >= 0`},
		{[]string{"--input", "-", "--limit", "0.5"}, `a fraction needs the number of tasks; give a file, not -`},
	}
	for _, c := range cases {
		args := append([]string{"run", "--out", t.TempDir(), "--model-url", "builtin:sim", "--server", "builtin:extraction"}, c.args...)
		r := runCLI(t, context.Background(), nil, args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
