package rundir

import (
	"os"
	"path/filepath"
	"testing"
)

// A run's state comes from its manifest (planned, complete) and its lock (live): each says so
// in its own words, and a finished run or a directory without a manifest says nothing.
func TestReadState(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "tasks.jsonl")
	if err := os.WriteFile(input, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if st, err := ReadState(out, 3); err != nil || st.Incomplete() || st.String() != "" {
		t.Errorf("no manifest: %+v %v, want nothing to say", st, err)
	}
	mf, err := NewManifest(input, map[string]int{"num_repeats": 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteManifest(out, mf); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		planned, done  int
		complete, lock bool
		want           string
	}{
		{0, 171, false, false, "incomplete: 171 rollouts"},
		{480, 171, false, false, "incomplete: 171 of 480 rollouts"},
		{480, 12, false, true, "running: 12 of 480 rollouts so far"},
		{480, 480, true, false, ""},
		{480, 480, true, true, "running: 480 of 480 rollouts so far"}, // a resume of a finished run
	} {
		if err := SetPlanned(out, c.planned); err != nil {
			t.Fatal(err)
		}
		if c.complete {
			if err := markComplete(out, c.done); err != nil {
				t.Fatal(err)
			}
		}
		unlock := func() {}
		if c.lock {
			if unlock, err = LockDir(out); err != nil {
				t.Fatal(err)
			}
		}
		st, err := ReadState(out, c.done)
		unlock()
		if err != nil || st.String() != c.want || st.Incomplete() != (c.want != "") {
			t.Errorf("%+v: %q (incomplete %v), %v; want %q", c, st.String(), st.Incomplete(), err, c.want)
		}
		m, _ := ReadManifest(out)
		m.Complete = nil
		WriteManifest(out, m)
	}
	if Live(out) {
		t.Error("Live after the lock was let go")
	}
	if err := SetPlanned(out, -1); err != nil {
		t.Fatal(err)
	}
	if m, _ := ReadManifest(out); m.Planned != 480 {
		t.Errorf("SetPlanned(-1) changed planned to %d", m.Planned)
	}
}
