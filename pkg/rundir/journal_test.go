package rundir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/internal/redact"
	"github.com/rollout-dev/rollout/pkg/record"
)

func result(task, rollout int64, class string, reward float64) *record.Result {
	r := &record.Result{Record: record.Record{TaskIndex: task, RolloutIndex: rollout, Arm: "multi", TaskID: "t", FailureClass: record.FailureClass(class), Reward: reward, HasReward: class == ""}}
	r.Trajectory = json.RawMessage(`{"rounds":[]}`)
	if class == "" {
		r.Verify = json.RawMessage(`{"reward":1}`)
	}
	return r
}

func fileLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// A sink writes each result's trajectory and NeMo Gym line before its journal record, and
// the journal is durable after Close; finalize derives the Parquet file and the summary.
func TestSinkAndFinalize(t *testing.T) {
	dir := t.TempDir()
	ng := filepath.Join(dir, "ng.jsonl")
	s, err := OpenSink(dir, SinkOptions{SyncEvery: 2, NemoGym: ng})
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(5) {
		class := ""
		if i == 3 {
			class = record.FailRateLimited
		}
		if err := s.Write(result(i, 0, class, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(fileLines(t, filepath.Join(dir, JournalFile))); n != 5 {
		t.Fatalf("journal has %d lines, want 5", n)
	}
	if n := len(fileLines(t, filepath.Join(dir, TrajectoriesFile))); n != 5 {
		t.Fatalf("trajectories has %d lines, want 5", n)
	}
	if n := len(fileLines(t, ng)); n != 4 {
		t.Fatalf("NeMo Gym file has %d lines, want 4 (the failed rollout has no verify answer)", n)
	}
	sum, _, err := finalize(dir, finalizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Rollouts != 5 || sum.Scored != 4 || sum.Failed != 1 {
		t.Errorf("summary %+v", sum)
	}
	recs, err := record.ReadParquet(filepath.Join(dir, ParquetFile))
	if err != nil || len(recs) != 5 {
		t.Fatalf("parquet: %d records, %v", len(recs), err)
	}
	if _, err := os.Stat(filepath.Join(dir, SummaryFile)); err != nil {
		t.Error(err)
	}
}

// After a crash the journal may end in a torn line and the side files may hold lines of
// rollouts that have no record. Compact keeps exactly one line per recorded rollout in every
// file, and record.ScanJSONL skips a torn tail.
func TestCompactAfterCrash(t *testing.T) {
	dir := t.TempDir()
	ng := filepath.Join(dir, "ng.jsonl")
	s, err := OpenSink(dir, SinkOptions{NemoGym: ng})
	if err != nil {
		t.Fatal(err)
	}
	s.Write(result(0, 0, "", 1))
	s.Write(result(1, 0, record.FailTimeout, 0))
	s.Write(result(2, 0, record.FailBadTask, 0))
	s.Write(result(3, 0, "", 1))
	s.Close()
	// The crash: task 4's side lines were written, its record was torn; a duplicate of task 0
	// (which cannot happen, but must not survive either).
	appendTo := func(path, text string) {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(text)
		f.Close()
	}
	appendTo(filepath.Join(dir, TrajectoriesFile), `{"task_index":4,"rollout_index":0,"arm":"multi","trajectory":null}`+"\n")
	appendTo(ng, `{"reward":1,"_ng_task_index":4,"_ng_rollout_index":0,"_ng_arm":"multi"}`+"\n")
	j := fileLines(t, filepath.Join(dir, JournalFile))
	appendTo(filepath.Join(dir, JournalFile), j[0]+"\n"+`{"task_index":4,"rollout_ind`)

	n := 0
	if err := record.ScanJSONL(filepath.Join(dir, JournalFile), func(*record.Record) error { n++; return nil }); err != nil || n != 5 {
		t.Fatalf("record.ScanJSONL: %d records, %v; want 5 (the torn line skipped)", n, err)
	}

	done, err := Compact(dir, ng, nil)
	if err != nil {
		t.Fatal(err)
	}
	if done.Len() != 4 || done.Has(record.Key{Task: 4, Rollout: 0, Arm: "multi"}) || !done.Has(record.Key{Task: 1, Rollout: 0, Arm: "multi"}) {
		t.Fatalf("done %v", done)
	}
	if got := len(fileLines(t, filepath.Join(dir, JournalFile))); got != 4 {
		t.Errorf("journal: %d lines after compaction, want 4", got)
	}
	if got := len(fileLines(t, filepath.Join(dir, TrajectoriesFile))); got != 4 {
		t.Errorf("trajectories: %d lines, want 4", got)
	}
	if got := fileLines(t, ng); len(got) != 2 || strings.Contains(strings.Join(got, ""), `"_ng_task_index":4`) {
		t.Errorf("NeMo Gym file: %v", got)
	}

	// --retry-failed: infrastructure failures go, a bad task stays.
	done, err = Compact(dir, ng, func(r *record.Record) bool { return !r.FailureClass.Infra() })
	if err != nil {
		t.Fatal(err)
	}
	if done.Len() != 3 || done.Has(record.Key{Task: 1, Rollout: 0, Arm: "multi"}) || !done.Has(record.Key{Task: 2, Rollout: 0, Arm: "multi"}) {
		t.Fatalf("after retry-failed: done %v", done)
	}
	if got := len(fileLines(t, filepath.Join(dir, TrajectoriesFile))); got != 3 {
		t.Errorf("trajectories: %d lines, want 3", got)
	}

	// A journal line that is not a record (not torn) is an error naming the line.
	appendTo(filepath.Join(dir, JournalFile), "garbage\n")
	if _, err := Compact(dir, "", nil); err == nil || !strings.Contains(err.Error(), JournalFile+":4") {
		t.Errorf("garbage line: err %v, want one naming %s:4", err, JournalFile)
	}
}

func TestManifestDifferences(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "tasks.jsonl")
	os.WriteFile(in, []byte("{}\n"), 0o644)
	type cfg struct {
		Seed int               `json:"seed"`
		Sim  map[string]string `json:"sim,omitempty"`
	}
	a, err := NewManifest(in, cfg{Seed: 1, Sim: map[string]string{"Latency": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteManifest(dir, a); err != nil {
		t.Fatal(err)
	}
	rec, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	same, _ := NewManifest(in, cfg{Seed: 1, Sim: map[string]string{"Latency": "0"}})
	if d := same.Differences(rec); len(d) != 0 {
		t.Errorf("same run: differences %v", d)
	}
	other, _ := NewManifest(in, cfg{Seed: 2, Sim: map[string]string{"Latency": "5ms"}})
	d := other.Differences(rec)
	if len(d) != 2 || d[0] != `seed was 1, now 2` || d[1] != `sim.Latency was "0", now "5ms"` {
		t.Errorf("differences %q", d)
	}
	os.WriteFile(in, []byte("{}\n{}\n"), 0o644)
	changed, _ := NewManifest(in, cfg{Seed: 1, Sim: map[string]string{"Latency": "0"}})
	if d := changed.Differences(rec); len(d) != 1 || !strings.Contains(d[0], "the input differs") {
		t.Errorf("changed input: %q", d)
	}
}

// Compact rewrites only what it must: a clean run's files are left as they are; lines to
// drop at the end are cut off in place; a line dropped before kept ones makes a new file.
// Either way, each file holds what a rewrite would have written.
func TestCompactRewritesOnlyWhatChanges(t *testing.T) {
	type fileID struct{ os.FileInfo }
	inode := func(path string) fileID {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fileID{st}
	}
	same := func(a, b fileID) bool { return os.SameFile(a.FileInfo, b.FileInfo) }
	appendTo := func(path, text string) {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(text)
		f.Close()
	}
	setup := func(t *testing.T) string {
		dir := t.TempDir()
		s, err := OpenSink(dir, SinkOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range int64(6) {
			class := ""
			if i == 2 {
				class = record.FailTimeout
			}
			if err := s.Write(result(i, 0, class, 1)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	journal := func(dir string) string { return filepath.Join(dir, JournalFile) }
	trajs := func(dir string) string { return filepath.Join(dir, TrajectoriesFile) }

	t.Run("clean", func(t *testing.T) {
		dir := setup(t)
		before, jIno, tIno := fileLines(t, journal(dir)), inode(journal(dir)), inode(trajs(dir))
		done, err := Compact(dir, "", nil)
		if err != nil || done.Len() != 6 {
			t.Fatalf("%d done, %v", done.Len(), err)
		}
		if !same(inode(journal(dir)), jIno) || !same(inode(trajs(dir)), tIno) || !slices.Equal(fileLines(t, journal(dir)), before) {
			t.Error("a clean run's files were rewritten")
		}
	})
	t.Run("tail", func(t *testing.T) {
		dir := setup(t)
		want := fileLines(t, trajs(dir))
		appendTo(trajs(dir), `{"task_index":6,"rollout_index":0,"arm":"multi","trajectory":null}`+"\n"+`{"task_index":7,"rollout_index":0,"arm":"multi","trajectory":null}`+"\n"+`{"task_ind`)
		appendTo(journal(dir), `{"task_index":6,"rollout_ind`)
		jIno, tIno := inode(journal(dir)), inode(trajs(dir))
		done, err := Compact(dir, "", nil)
		if err != nil || done.Len() != 6 {
			t.Fatalf("%d done, %v", done.Len(), err)
		}
		if !same(inode(journal(dir)), jIno) || !same(inode(trajs(dir)), tIno) {
			t.Error("files were rewritten, not cut")
		}
		if got := fileLines(t, trajs(dir)); !slices.Equal(got, want) {
			t.Errorf("trajectories:\n%q\nwant\n%q", got, want)
		}
		if got := fileLines(t, journal(dir)); len(got) != 6 || !strings.HasSuffix(got[5], "}") {
			t.Errorf("journal: %q", got)
		}
	})
	t.Run("middle", func(t *testing.T) {
		dir := setup(t)
		j, tr := fileLines(t, journal(dir)), fileLines(t, trajs(dir))
		tIno := inode(trajs(dir))
		done, err := Compact(dir, "", func(r *record.Record) bool { return !r.FailureClass.Infra() })
		if err != nil || done.Len() != 5 || done.Has(record.Key{Task: 2, Rollout: 0, Arm: "multi"}) {
			t.Fatalf("%v done, %v", done, err)
		}
		if same(inode(trajs(dir)), tIno) {
			t.Error("the trajectories file was not rewritten")
		}
		wantJ := slices.Delete(slices.Clone(j), 2, 3)
		wantT := slices.Delete(slices.Clone(tr), 2, 3)
		if got := fileLines(t, journal(dir)); !slices.Equal(got, wantJ) {
			t.Errorf("journal:\n%q\nwant\n%q", got, wantJ)
		}
		if got := fileLines(t, trajs(dir)); !slices.Equal(got, wantT) {
			t.Errorf("trajectories:\n%q\nwant\n%q", got, wantT)
		}
		if _, err := os.Stat(trajs(dir) + ".compact"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("temporary file left: %v", err)
		}
	})
}

// Trajectory lines out of the records' order, repeated, or of rollouts without a record:
// the first line of each recorded rollout stays, in its place.
func TestCompactTrajectoryOrder(t *testing.T) {
	dir := t.TempDir()
	rec := func(task int64) string {
		r := result(task, 0, "", 1)
		b, _ := json.Marshal(&r.Record)
		return string(b)
	}
	traj := func(task int64, note string) string {
		return fmt.Sprintf(`{"task_index":%d,"rollout_index":0,"arm":"multi","trajectory":%q}`, task, note)
	}
	write := func(name string, ls ...string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(ls, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(JournalFile, rec(0), rec(1), rec(2), rec(3))
	write(TrajectoriesFile,
		traj(0, "a"), traj(9, "orphan"), traj(2, "b"), traj(1, "c"), traj(1, "dup"), traj(0, "dup"),
		`{"task_index":3,"rollout_index":0,"arm":"multi","trajectory":"not json"`, traj(3, "d"), traj(2, "dup"))
	done, err := Compact(dir, "", nil)
	if err != nil || done.Len() != 4 {
		t.Fatalf("%d done, %v", done.Len(), err)
	}
	want := []string{traj(0, "a"), traj(2, "b"), traj(1, "c"), traj(3, "d")}
	if got := fileLines(t, filepath.Join(dir, TrajectoriesFile)); !slices.Equal(got, want) {
		t.Errorf("trajectories:\n%q\nwant\n%q", got, want)
	}
}

// Secrets given to the sink reach no file, whatever field of a result they are in: the
// record's strings, the trajectory (in a string, JSON-escaped, or outside any string), the
// verify answer. Every line stays valid JSON, and the Parquet file made from the journal is
// clean too.
func TestSinkRedactsSecrets(t *testing.T) {
	const key = "sk-secret-0123456789"
	const num = "98765432109876"
	dir := t.TempDir()
	ng := filepath.Join(dir, NemoGymFile)
	s, err := OpenSink(dir, SinkOptions{NemoGym: ng, Secrets: []string{key, num, "short"}})
	if err != nil {
		t.Fatal(err)
	}
	r := result(0, 0, "", 1)
	r.Record.Model, r.Record.Error, r.Record.Agent = "m-"+key, "echo: "+key, key
	r.Record.ToolNames = []string{key}
	r.Record.TaskFields = map[string]string{"note": key}
	r.Trajectory = json.RawMessage(`{"rounds":[{"finish_reason":"` + key + `","content":"a \"q\" ` + key + `"}],"short":"short"}`)
	r.Verify = json.RawMessage(`{"reward":1,"echo":"` + key + `"}`)
	r2 := result(1, 0, record.FailModelError, 0)
	r2.Trajectory = json.RawMessage(`{"n":` + num + `}`) // outside a string
	for _, res := range []*record.Result{r, r2} {
		if err := s.Write(res); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := finalize(dir, finalizeOptions{}); err != nil {
		t.Fatal(err)
	}
	recs, err := record.ReadParquet(filepath.Join(dir, ParquetFile))
	if err != nil || len(recs) != 2 {
		t.Fatalf("parquet: %d records, %v", len(recs), err)
	}
	decoded, _ := json.Marshal(recs)
	for _, name := range []string{JournalFile, TrajectoriesFile, NemoGymFile, SummaryFile} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{key, num} {
			if bytes.Contains(b, []byte(secret)) || bytes.Contains(decoded, []byte(secret)) {
				t.Errorf("%s holds the secret %s:\n%s", name, secret, b)
			}
		}
		for i, l := range fileLines(t, filepath.Join(dir, name)) {
			if name != SummaryFile && !json.Valid([]byte(l)) {
				t.Errorf("%s line %d is not JSON: %s", name, i+1, l)
			}
		}
	}
	traj := strings.Join(fileLines(t, filepath.Join(dir, TrajectoriesFile)), "\n")
	for _, want := range []string{`"finish_reason":"[REDACTED]"`, `"short":"short"`, `a \"q\" [REDACTED]`, `outside a string`} {
		if !strings.Contains(traj, want) {
			t.Errorf("trajectories lack %s:\n%s", want, traj)
		}
	}
	if recs[0].Error != "echo: [REDACTED]" || recs[0].TaskFields["note"] != redact.Placeholder {
		t.Errorf("record: error %q, task fields %v", recs[0].Error, recs[0].TaskFields)
	}
}

// CountClass counts the records of a class from the journal's bytes: across block boundaries,
// and not when the text is inside a string (an error that quotes it).
func TestCountClass(t *testing.T) {
	dir := t.TempDir()
	if n, err := CountClass(dir, record.FailCancelled); n != 0 || err != nil {
		t.Fatalf("no journal: %d, %v", n, err)
	}
	s, err := OpenSink(dir, SinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for i := range int64(30000) { // ~10 MB: many blocks
		class := ""
		switch i % 7 {
		case 3:
			class = record.FailCancelled
			want++
		case 5:
			class = record.FailTimeout
		}
		r := result(i, 0, class, 1)
		r.Record.Error = `quoted: "failure_class":"cancelled"` + strings.Repeat("x", int(i%300))
		if err := s.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := CountClass(dir, record.FailCancelled); n != want || err != nil {
		t.Errorf("CountClass: %d, %v; want %d", n, err, want)
	}
	n := 0
	record.ScanJSONL(filepath.Join(dir, JournalFile), func(r *record.Record) error {
		if r.FailureClass == record.FailCancelled {
			n++
		}
		return nil
	})
	if n != want {
		t.Errorf("the journal has %d cancelled records, want %d", n, want)
	}
}

// A resume's compaction of trajectory and NeMo Gym lines far longer than the head it holds of
// a line (keys first or last, kept and dropped, malformed, torn) leaves the same bytes as
// with every line held whole, without holding a long line: what it allocates stays below the
// longest line's length.
func TestCompactLinesLongerThanTheHead(t *testing.T) {
	huge := strings.Repeat("h", 32<<20)
	pad := strings.Repeat("p", 300_000)
	rec := func(task int64, class string) string {
		r := result(task, 0, class, 1)
		b, _ := json.Marshal(&r.Record)
		return string(b)
	}
	first := func(task int64, body string) string {
		return fmt.Sprintf(`{"task_index":%d,"rollout_index":0,"arm":"multi","trajectory":%q}`, task, body)
	}
	last := func(task int64, body string) string {
		return fmt.Sprintf(`{"trajectory":{"messages":[{"role":"user","content":%q}]},"arm":"multi","rollout_index":0,"task_index":%d}`, body, task)
	}
	ng := func(task int64, body string, keysFirst bool) string {
		keys := fmt.Sprintf(`%q:%d,%q:0,%q:"multi"`, ngTaskIndexKey, task, ngRolloutIndexKey, ngArmKey)
		if keysFirst {
			return `{` + keys + `,"responses_create_params":{"input":[{"role":"user","content":"` + body + `"}]}}`
		}
		return `{"responses_create_params":{"input":[{"role":"user","content":"` + body + `"}]},` + keys + `}`
	}
	trajs := []string{
		first(0, pad),       // kept
		last(9, pad),        // no record: dropped
		last(1, huge),       // kept, keys after 32 MiB
		first(2, pad),       // a timeout, run again: dropped
		first(1, pad+"dup"), // a second line of a kept rollout: dropped
		first(3, "short"),   // kept
		`{"task_index":4,"rollout_index":0,"arm":"multi","trajectory":"` + pad + `"`, // malformed: dropped
		last(4, pad),  // kept
		first(5, "x"), // kept
	}
	ngs := []string{
		ng(0, pad, false), ng(2, pad, true), `{"responses_create_params":"` + pad + `"}`, ng(1, pad, true),
		ng(9, pad, false), ng(3, "s", true), ng(1, pad, false), ng(4, pad, false), ng(5, "t", true),
	}
	setup := func() string {
		dir := t.TempDir()
		write := func(name, text string) {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write(JournalFile, strings.Join([]string{rec(0, ""), rec(1, ""), rec(2, record.FailTimeout), rec(3, ""), rec(4, ""), rec(5, "")}, "\n")+"\n")
		write(TrajectoriesFile, strings.Join(trajs, "\n")+"\n"+first(6, pad)) // a torn last line
		write(NemoGymFile, strings.Join(ngs, "\n")+"\n"+ng(6, pad, false))
		return dir
	}
	compact := func(dir string) {
		t.Helper()
		done, err := Compact(dir, filepath.Join(dir, NemoGymFile), func(r *record.Record) bool { return !r.FailureClass.Infra() })
		if err != nil || done.Len() != 5 || done.Has(record.Key{Task: 2, Rollout: 0, Arm: "multi"}) {
			t.Fatalf("%v done, %v", done, err)
		}
	}
	whole := setup() // the head far above every line but the huge one, which is held whole too
	defer SetSideLineHead(len(huge) + 1)()
	compact(whole)

	SetSideLineHead(16)
	heads := setup()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	compact(heads)
	runtime.ReadMemStats(&after)
	t.Logf("the compaction of heads allocated %d bytes", after.TotalAlloc-before.TotalAlloc)
	if got := after.TotalAlloc - before.TotalAlloc; got >= uint64(len(huge)) {
		t.Errorf("the compaction allocated %d bytes for a line of %d", got, len(huge))
	}

	for _, f := range []struct {
		name string
		want []string
	}{
		{TrajectoriesFile, []string{trajs[0], trajs[2], trajs[5], trajs[7], trajs[8]}},
		{NemoGymFile, []string{ngs[0], ngs[3], ngs[5], ngs[7], ngs[8]}},
	} {
		a, err := os.ReadFile(filepath.Join(whole, f.name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(heads, f.name))
		if err != nil {
			t.Fatal(err)
		}
		if string(a) != strings.Join(f.want, "\n")+"\n" {
			t.Errorf("%s of whole lines: %d bytes, %d lines; want %d lines", f.name, len(a), bytes.Count(a, []byte("\n")), len(f.want))
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s of heads: %d bytes, differs from that of whole lines (%d bytes)", f.name, len(b), len(a))
		}
	}
}
