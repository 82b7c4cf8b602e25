package rundir

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
)

// writeTrajLines appends one trajectory line per key through the TrajectoryWriter, each
// trajectory naming its key, so that a read can be checked against what was written.
func writeTrajLines(t *testing.T, dir string, keys []record.Key) {
	t.Helper()
	w, err := NewTrajectoryWriter(filepath.Join(dir, TrajectoriesFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		content, _ := json.Marshal(fmt.Sprintf("task %d rollout %d arm %s", k.Task, k.Rollout, k.Arm))
		traj := fmt.Sprintf(`{"messages":[{"role":"user","content":%s}]}`, content)
		if err := w.Write(&record.Result{Record: record.Record{TaskIndex: k.Task, RolloutIndex: k.Rollout, Arm: k.Arm}, Trajectory: []byte(traj)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func readTraj(t *testing.T, tr *Trajectories, k record.Key) (string, bool) {
	t.Helper()
	line, ok, err := tr.Line(k.Task, k.Rollout, k.Arm)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return "", false
	}
	var l struct {
		Trajectory struct {
			Messages []struct{ Content string } `json:"messages"`
		} `json:"trajectory"`
	}
	if err := json.Unmarshal(line, &l); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	return l.Trajectory.Messages[0].Content, true
}

func TestTrajectoriesIndex(t *testing.T) {
	dir := t.TempDir()
	var keys []record.Key
	for task := int64(9); task >= 0; task-- { // out of key order, as rollouts finish
		for _, arm := range []string{"single", "multi", `a "quoted" \ arm`} {
			keys = append(keys, record.Key{Task: task, Rollout: task % 3, Arm: arm})
		}
	}
	writeTrajLines(t, dir, keys)
	n, err := WriteTrajIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(keys) {
		t.Fatalf("index has %d entries, want %d", n, len(keys))
	}
	tr, err := OpenTrajectories(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		got, ok := readTraj(t, tr, k)
		want := fmt.Sprintf("task %d rollout %d arm %s", k.Task, k.Rollout, k.Arm)
		if !ok || got != want {
			t.Fatalf("%v: got %q %v, want %q", k, got, ok, want)
		}
	}
	for _, k := range []record.Key{{Task: 3, Rollout: 1, Arm: "single"}, {Task: 0, Rollout: 0, Arm: "nope"}, {Task: 99, Arm: "multi"}} {
		if _, ok := readTraj(t, tr, k); ok {
			t.Errorf("%v: found a line for a rollout that has none", k)
		}
	}

	// A resumed run appends: the index no longer covers the file and is rebuilt; the later
	// line of a key wins.
	extra := []record.Key{{Task: 100, Rollout: 0, Arm: "multi"}}
	writeTrajLines(t, dir, extra)
	w, _ := NewTrajectoryWriter(filepath.Join(dir, TrajectoriesFile))
	if err := w.Write(&record.Result{Record: record.Record{TaskIndex: 0, RolloutIndex: 0, Arm: "single"}, Trajectory: []byte(`{"messages":[{"role":"user","content":"again"}]}`)}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	tr, err = OpenTrajectories(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := readTraj(t, tr, extra[0]); !ok || got != "task 100 rollout 0 arm multi" {
		t.Errorf("appended line: got %q %v", got, ok)
	}
	if got, _ := readTraj(t, tr, record.Key{Task: 0, Rollout: 0, Arm: "single"}); got != "again" {
		t.Errorf("a key written twice: got %q, want the later line", got)
	}
	if tr.Len() != len(keys)+1 {
		t.Errorf("Len %d, want %d", tr.Len(), len(keys)+1)
	}
	// The rebuilt index was written: a fresh open reads it and finds the same.
	b, err := os.ReadFile(filepath.Join(dir, TrajIndexFile))
	if err != nil {
		t.Fatal(err)
	}
	if x, err := decodeTrajIndex(b); err != nil || x.Len() != len(keys)+1 {
		t.Fatalf("rewritten index: %v", err)
	}
}

// An index that is not one, or is cut short, or points at the wrong lines (the file was
// rewritten with the same length) is not trusted: the reader rebuilds it.
func TestTrajectoriesIndexDamaged(t *testing.T) {
	keys := []record.Key{{Task: 0, Arm: "a"}, {Task: 1, Arm: "a"}, {Task: 2, Arm: "a"}}
	for name, damage := range map[string]func(dir string, idx []byte) []byte{
		"garbage":   func(string, []byte) []byte { return []byte("hello\n") },
		"truncated": func(_ string, idx []byte) []byte { return idx[:len(idx)-5] },
		"empty":     func(string, []byte) []byte { return nil },
		// Counts and offsets are input: each is checked against the bytes before it is used.
		"2^62 entries": func(_ string, idx []byte) []byte {
			head := idxHeaderLen(t, idx)
			return binary.LittleEndian.AppendUint64(slices.Clone(idx[:head]), 1<<62)
		},
		"2^32-1 arms": func(_ string, idx []byte) []byte {
			b := slices.Clone(idx)
			binary.LittleEndian.PutUint32(b[len(trajIndexMagic)+8:], math.MaxUint32)
			return b
		},
		"negative offset": func(_ string, idx []byte) []byte {
			b := slices.Clone(idx)
			binary.LittleEndian.PutUint64(b[len(b)-8:], uint64(1<<63))
			return b
		},
		"offset past the end": func(_ string, idx []byte) []byte {
			b := slices.Clone(idx)
			binary.LittleEndian.PutUint64(b[len(b)-8:], 1<<40)
			return b
		},
		"negative length covered": func(dir string, idx []byte) []byte {
			b := slices.Clone(idx)
			binary.LittleEndian.PutUint64(b[len(trajIndexMagic):], uint64(1<<63))
			return b
		},
		"stale offsets": func(dir string, idx []byte) []byte {
			// The same lines in another order: same length, other offsets.
			p := filepath.Join(dir, TrajectoriesFile)
			b, _ := os.ReadFile(p)
			l := strings.SplitAfter(string(b), "\n")
			os.WriteFile(p, []byte(l[2]+l[1]+l[0]), 0o644)
			return idx
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeTrajLines(t, dir, keys)
			if _, err := WriteTrajIndex(dir); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, TrajIndexFile)
			idx, _ := os.ReadFile(p)
			if err := os.WriteFile(p, damage(dir, idx), 0o644); err != nil {
				t.Fatal(err)
			}
			tr, err := OpenTrajectories(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if got, ok := readTraj(t, tr, k); !ok || got != fmt.Sprintf("task %d rollout 0 arm a", k.Task) {
					t.Errorf("%v: got %q %v", k, got, ok)
				}
			}
		})
	}
}

// idxHeaderLen is the length of an index file's bytes before its entry count.
func idxHeaderLen(t *testing.T, idx []byte) int {
	t.Helper()
	n := len(trajIndexMagic) + 8
	narms := binary.LittleEndian.Uint32(idx[n:])
	n += 4
	for range narms {
		n += 4 + int(binary.LittleEndian.Uint32(idx[n:]))
	}
	return n
}

func TestTrajectoriesIndexErrors(t *testing.T) {
	dir := t.TempDir()
	// No trajectories file: an empty index, nothing found, no error.
	tr, err := OpenTrajectories(dir)
	if err != nil || tr.Len() != 0 {
		t.Fatalf("no file: %v, %d", err, tr.Len())
	}
	if _, err := os.Stat(filepath.Join(dir, TrajIndexFile)); err == nil {
		t.Error("an index was written for a run without trajectories")
	}
	// A line that is not a trajectory line: the error names the file and line.
	p := filepath.Join(dir, TrajectoriesFile)
	os.WriteFile(p, []byte(`{"task_index":0,"rollout_index":0,"arm":"a","trajectory":null}`+"\nnot json\n"), 0o644)
	_, err = OpenTrajectories(dir)
	if err == nil || !strings.Contains(err.Error(), p+":2:") {
		t.Fatalf("got %v, want an error naming %s:2", err, p)
	}
}

// A line of trajectories.jsonl longer than MaxTrajectoryLine is a *LineTooLongError naming the
// file and offset, read no further than the bound; the other lines, one of exactly the bound's
// length included, are read.
func TestTrajectoryLineBound(t *testing.T) {
	dir := t.TempDir()
	short := `{"task_index":0,"rollout_index":0,"arm":"a","trajectory":null}`
	exact := `{"task_index":1,"rollout_index":0,"arm":"a","trajectory":null,"pad":"` + strings.Repeat("x", 100) + `"}`
	long := `{"task_index":2,"rollout_index":0,"arm":"a","trajectory":null,"pad":"` + strings.Repeat("y", 1000) + `"}`
	if err := os.WriteFile(filepath.Join(dir, TrajectoriesFile), []byte(short+"\n"+exact+"\n"+long+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	saved := MaxTrajectoryLine
	MaxTrajectoryLine = int64(len(exact))
	t.Cleanup(func() { MaxTrajectoryLine = saved })
	tr, err := OpenTrajectories(dir)
	if err != nil {
		t.Fatal(err)
	}
	for task, want := range map[int64]string{0: short, 1: exact} {
		if line, ok, err := tr.Line(task, 0, "a"); err != nil || !ok || string(line) != want {
			t.Errorf("task %d: %q %v %v", task, line, ok, err)
		}
	}
	_, _, err = tr.Line(2, 0, "a")
	var tooLong *LineTooLongError
	if !errors.As(err, &tooLong) || tooLong.Offset != int64(len(short)+len(exact)+2) || !strings.Contains(err.Error(), TrajectoriesFile) {
		t.Fatalf("the long line: %v", err)
	}
}

// WriteTrajIndex, whose keys go to sorted runs on disk past trajSpillEntries, writes the bytes
// of the index built in memory: every key once, at its last line (lines written again by a
// resume), whatever the size of the runs; and leaves no temporary file behind.
func TestWriteTrajIndexSpilledIsTheIndexInMemory(t *testing.T) {
	dir := t.TempDir()
	var keys []record.Key
	for i := range 200 {
		keys = append(keys, record.Key{Task: int64((i * 37) % 90), Rollout: int64(i % 3), Arm: []string{"single", "multi"}[i%2]})
	}
	writeTrajLines(t, dir, keys)
	x, err := BuildTrajIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	if err := x.encode(&want); err != nil {
		t.Fatal(err)
	}
	if x.Len() >= len(keys) {
		t.Fatalf("the keys have no duplicate: %d entries of %d lines", x.Len(), len(keys))
	}
	defer func(n int) { trajSpillEntries = n }(trajSpillEntries)
	for _, spill := range []int{1, 3, 64, 1 << 18} {
		trajSpillEntries = spill
		n, err := WriteTrajIndex(dir)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, TrajIndexFile))
		if err != nil {
			t.Fatal(err)
		}
		if n != x.Len() || string(got) != want.String() {
			t.Fatalf("runs of %d: %d entries, want %d; the file differs from the index built in memory", spill, n, x.Len())
		}
		left, _ := os.ReadDir(dir)
		if len(left) != 2 {
			t.Errorf("runs of %d: the directory has %v", spill, left)
		}
	}
}

// Clipped reads a line far longer than MaxTrajectoryLine (a 1 MB tool result, the bound set to
// 4 KiB) through a fixed buffer: its long strings cut at a character boundary past the string
// bound, ending with a note of their size, everything else as a whole decode reads it. A line
// whose kept part is still over the bound is a *LineTooLongError naming the file and offset.
func TestClippedReadsALineLongerThanTheBound(t *testing.T) {
	dir := t.TempDir()
	const unit = `é\"x` // 5 bytes as written, 3 characters read
	units := 200_000
	huge := `{"task_index":0,"rollout_index":0,"arm":"a","trajectory":{"messages":[{"role":"user","content":"hi"},` +
		`{"role":"tool","content":"` + strings.Repeat(unit, units) + `"},{"role":"assistant","content":"done \u00e9"}],"termination":"completed"}}`
	wide := `{"task_index":1,"rollout_index":0,"arm":"a","trajectory":{"messages":[` + strings.Repeat(`{"role":"user","content":"hello"},`, 400) + `{"role":"user","content":"end"}]}}`
	none := `{"task_index":2,"rollout_index":0,"arm":"a","trajectory":null}`
	if err := os.WriteFile(filepath.Join(dir, TrajectoriesFile), []byte(huge+"\n"+wide+"\n"+none+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	saved := MaxTrajectoryLine
	MaxTrajectoryLine = 4 << 10
	t.Cleanup(func() { MaxTrajectoryLine = saved })
	tr, err := OpenTrajectories(dir)
	if err != nil {
		t.Fatal(err)
	}
	var tooLong *LineTooLongError
	if _, _, err := tr.Line(0, 0, "a"); !errors.As(err, &tooLong) {
		t.Fatalf("Line of the 1 MB line: %v", err)
	}
	raw, ok, err := tr.Clipped(0, 0, "a", 100)
	if err != nil || !ok {
		t.Fatalf("Clipped: %v %v", ok, err)
	}
	var got struct {
		Messages []struct {
			Role, Content string
		}
		Termination string
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	wantTool := strings.Repeat(`é"x`, 20) + ClipNote(int64(len(unit)*units))
	if len(got.Messages) != 3 || got.Messages[0].Content != "hi" || got.Messages[1].Content != wantTool ||
		got.Messages[2].Content != "done é" || got.Termination != "completed" {
		t.Errorf("clipped: %+v", got)
	}
	// Cut inside an escape or a character: the cut waits for the boundary.
	for max := 96; max <= 104; max++ {
		raw, _, err := tr.Clipped(0, 0, "a", max)
		if err != nil {
			t.Fatalf("max %d: %v", max, err)
		}
		if err := json.Unmarshal(raw, &got); err != nil || !strings.HasSuffix(got.Messages[1].Content, ClipNote(int64(len(unit)*units))) ||
			!strings.HasPrefix(strings.Repeat(`é"x`, 21), strings.TrimSuffix(got.Messages[1].Content, ClipNote(int64(len(unit)*units)))) {
			t.Errorf("max %d: %v %.80q", max, err, got.Messages[1].Content)
		}
	}
	if raw, ok, err := tr.Clipped(2, 0, "a", 100); err != nil || !ok || string(raw) != "null" {
		t.Errorf("no trajectory: %s %v %v", raw, ok, err)
	}
	if _, ok, err := tr.Clipped(9, 0, "a", 100); ok || err != nil {
		t.Errorf("no line: %v %v", ok, err)
	}
	_, _, err = tr.Clipped(1, 0, "a", 100)
	if !errors.As(err, &tooLong) || tooLong.Offset != int64(len(huge)+1) || tooLong.Limit != 4<<10 || !strings.Contains(err.Error(), TrajectoriesFile) {
		t.Errorf("a line of many short strings over the bound: %v", err)
	}
}

// The index scan holds at most trajKeyHead bytes of a line (lowered here to 16): lines far
// longer, their keys first, last (after the long member) or spelled with escapes, are indexed
// at their offsets, the same index as one built holding every line whole; a long line that is
// not JSON is an error naming its line.
func TestTrajIndexOfLinesLongerThanTheHead(t *testing.T) {
	dir := t.TempDir()
	pad := strings.Repeat("p", 300_000)
	body := []string{
		`{"task_index":0,"rollout_index":0,"arm":"a","trajectory":null}`,
		`{"task_index":1,"rollout_index":2,"arm":"b","trajectory":{"messages":[{"role":"user","content":"` + pad + `"}]}}`,
		`{"trajectory":{"messages":[{"role":"user","content":"` + pad + `"}]},"arm":"a","rollout_index":1,"task_index":5}`,
		`{"task_index":3,"rollout_index":0,"arm":"b"}`,
		`{"trajectory":"` + pad + `","t\u0061sk_index":7,"rollout_index":0,"arm":"b"}`,
		`{"task_index":1,"rollout_index":2,"arm":"b","trajectory":"` + pad + `again"}`, // a resume's line: it wins
	}
	path := filepath.Join(dir, TrajectoriesFile)
	if err := os.WriteFile(path, []byte(strings.Join(body, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	whole, err := BuildTrajIndex(dir) // the head far above every line: lines held whole
	if err != nil {
		t.Fatal(err)
	}
	defer func(n int) { trajKeyHead = n }(trajKeyHead)
	trajKeyHead = 16
	heads, err := BuildTrajIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	var a, b strings.Builder
	if err := whole.encode(&a); err != nil {
		t.Fatal(err)
	}
	if err := heads.encode(&b); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() || heads.Len() != 5 {
		t.Fatalf("%d entries; the index of heads differs from the index of whole lines", heads.Len())
	}
	if _, err := WriteTrajIndex(dir); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, TrajIndexFile)); err != nil || string(got) != a.String() {
		t.Fatalf("WriteTrajIndex differs: %v", err)
	}
	tr, err := OpenTrajectories(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		task, rollout int64
		arm           string
		line          int
	}{{0, 0, "a", 0}, {1, 2, "b", 5}, {5, 1, "a", 2}, {3, 0, "b", 3}, {7, 0, "b", 4}} {
		if line, ok, err := tr.Line(k.task, k.rollout, k.arm); err != nil || !ok || string(line) != body[k.line] {
			t.Errorf("task %d: %d bytes, %v %v; want line %d", k.task, len(line), ok, err, k.line+1)
		}
	}
	bad := body[0] + "\n" + `{"task_index":1,"trajectory":"` + pad + `",}` + "\n"
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := BuildTrajIndex(dir); err == nil || !strings.Contains(err.Error(), TrajectoriesFile+":2: not a trajectory line") {
		t.Fatalf("a long malformed line: %v", err)
	}
}
