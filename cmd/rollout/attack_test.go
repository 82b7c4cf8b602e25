package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
	"github.com/rollout-dev/rollout/pkg/wire"
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
	// can check that no input changed (unchanged); ids the files themselves, so that a file
	// replaced by one with the same bytes is caught too.
	sums map[string]string
	ids  map[string]os.FileInfo
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
	{
		name: "report --html onto the run's trajectories",
		args: func(t *testing.T, f *attackFixture) []string {
			return []string{"report", f.run, "--html", f.file("run/trajectories.jsonl")}
		},
		exit:   2,
		stderr: "is inside the run directory",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "report --html onto the run's journal",
		args: func(t *testing.T, f *attackFixture) []string {
			return []string{"report", f.run, "--html", f.file("run/journal.jsonl")}
		},
		exit:   2,
		stderr: "is inside the run directory",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name:   "report --html onto the run's task file",
		args:   func(t *testing.T, f *attackFixture) []string { return []string{"report", f.run, "--html", f.tasks} },
		exit:   2,
		stderr: "is the input",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "report --html onto a hard link to the task file",
		args: func(t *testing.T, f *attackFixture) []string {
			f.link(t, f.tasks, "report.html", os.Link)
			return []string{"report", f.run, "--html", f.file("report.html")}
		},
		exit:   2,
		stderr: "is the input",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "report --html through a symbolic link to the run",
		args: func(t *testing.T, f *attackFixture) []string {
			f.link(t, f.run, "alias", os.Symlink)
			return []string{"report", f.run, "--html", f.file("alias/rollouts.parquet")}
		},
		exit:   2,
		stderr: "is inside the run directory",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "merge --jsonl-out onto a shard's journal",
		args: func(t *testing.T, f *attackFixture) []string {
			return f.merge(t, "--jsonl-out", f.file("s0/journal.jsonl"))
		},
		exit:   2,
		stderr: "is inside the shard directory",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t); f.absent(t, "merged/manifest.json") },
	},
	{
		name:   "merge --jsonl-out onto the task file",
		args:   func(t *testing.T, f *attackFixture) []string { return f.merge(t, "--jsonl-out", f.tasks) },
		exit:   2,
		stderr: "is the input",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t); f.absent(t, "merged/manifest.json") },
	},
	{
		name: "merge --jsonl-out onto another run's journal",
		args: func(t *testing.T, f *attackFixture) []string {
			return f.merge(t, "--jsonl-out", f.file("run/journal.jsonl"))
		},
		exit:   2,
		stderr: "is inside the run directory",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t); f.absent(t, "merged/manifest.json") },
	},
	{
		name:   "merge --out onto a directory that holds a run: exit 2, as run",
		args:   func(t *testing.T, f *attackFixture) []string { return f.mergeInto(t, f.run) },
		exit:   2,
		stderr: "already holds a run",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "export -o onto the run's journal",
		args: func(t *testing.T, f *attackFixture) []string {
			return []string{"export", f.run, "--format", "sft", "-o", f.file("run/journal.jsonl")}
		},
		exit:   2,
		stderr: "is inside the run directory",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "export -o onto the run's Parquet file",
		args: func(t *testing.T, f *attackFixture) []string {
			return []string{"export", f.run, "--format", "rl", "-o", f.file("run/rollouts.parquet")}
		},
		exit:   2,
		stderr: "is inside the run directory",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "export -o onto the run's task file",
		args: func(t *testing.T, f *attackFixture) []string {
			return []string{"export", f.run, "--format", "sft", "-o", f.tasks}
		},
		exit:   2,
		stderr: "is the input",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "export -o onto its --input",
		args: func(t *testing.T, f *attackFixture) []string {
			f.link(t, f.tasks, "other.jsonl", os.Link)
			return []string{"export", f.run, "--format", "sft", "--input", f.file("other.jsonl"), "-o", f.file("other.jsonl")}
		},
		exit:   2,
		stderr: "is the input",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "export -o onto an existing file without --overwrite",
		args: func(t *testing.T, f *attackFixture) []string {
			f.write(t, "notes.jsonl", "{\"keep\":1}\n")
			return []string{"export", f.run, "--format", "sft", "-o", f.file("notes.jsonl")}
		},
		exit:   2,
		stderr: "already exists",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "export -o onto an existing file with --overwrite",
		args: func(t *testing.T, f *attackFixture) []string {
			f.write(t, "notes.jsonl", "{\"keep\":1}\n")
			return []string{"export", f.run, "--format", "sft", "-o", f.file("notes.jsonl"), "--overwrite"}
		},
		exit: 0,
		check: func(t *testing.T, f *attackFixture, r result) {
			if n := strings.Count(readFile(t, f.file("notes.jsonl")), "\n"); n != 24 || strings.Contains(readFile(t, f.file("notes.jsonl")), "keep") {
				t.Errorf("--overwrite: %d lines, want the 24 rows alone", n)
			}
		},
	},
	{
		name: "export --input of lines that are not tasks",
		args: func(t *testing.T, f *attackFixture) []string {
			f.write(t, "junk.jsonl", "{\"foo\":1}\nnot json\n")
			return []string{"export", f.run, "--format", "sft", "--input", f.file("junk.jsonl"), "-o", f.file("sft.jsonl")}
		},
		exit:   2,
		stderr: "junk.jsonl is not the task file of",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t); f.absent(t, "sft.jsonl") },
	},
	{
		name: "export --format nemo-gym --input of lines that are not tasks, for a run without the input's hash",
		args: func(t *testing.T, f *attackFixture) []string {
			f.editManifest(t, "run", func(m *rundir.Manifest) { m.Input, m.InputSHA256 = "-", "" })
			f.write(t, "junk.jsonl", "{\"foo\":1}\nnot json\n")
			return []string{"export", f.run, "--format", "nemo-gym", "--input", f.file("junk.jsonl"), "-o", f.file("ng.jsonl")}
		},
		exit:   2,
		stderr: "not the run's task file",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t); f.absent(t, "sft.jsonl") },
	},
	{
		name: "export --input that does not exist",
		args: func(t *testing.T, f *attackFixture) []string {
			return []string{"export", f.run, "--format", "sft", "--input", f.file("none.jsonl"), "-o", f.file("sft.jsonl")}
		},
		exit:   2,
		stderr: "none.jsonl",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t); f.absent(t, "sft.jsonl") },
	},
	{
		name: "run --jsonl-out onto another run's journal, with --overwrite",
		args: func(t *testing.T, f *attackFixture) []string {
			return []string{"run", "--input", f.tasks, "--out", f.file("new"), "--jsonl-out", f.file("run/journal.jsonl"), "--overwrite",
				"--model-url", "builtin:sim", "--server", "builtin:extraction", "--quiet"}
		},
		exit:   2,
		stderr: "is inside the run directory",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "gen -o onto a run's journal",
		args: func(t *testing.T, f *attackFixture) []string {
			return []string{"gen", "extraction", "--n", "3", "-o", f.file("run/journal.jsonl")}
		},
		exit:   2,
		stderr: "is inside the run directory",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "resume of a copied run does not write the original's --jsonl-out",
		args: func(t *testing.T, f *attackFixture) []string {
			f.copiedRun(t)
			return []string{"run", "--resume", "--retry-failed", "--out", f.file("copy"), "--quiet"}
		},
		exit:   2,
		stderr: "belongs to the run",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "resume of a copied run with its own --jsonl-out",
		args: func(t *testing.T, f *attackFixture) []string {
			f.copiedRun(t)
			return []string{"run", "--resume", "--retry-failed", "--out", f.file("copy"), "--jsonl-out", f.file("copy.jsonl"), "--quiet"}
		},
		exit: 0,
		check: func(t *testing.T, f *attackFixture, r result) {
			f.unchangedExcept(t, "copy"+string(filepath.Separator))
			if n := strings.Count(readFile(t, f.file("copy.jsonl")), "\n"); n != 6 {
				t.Errorf("the copy's --jsonl-out: %d lines, want 6", n)
			}
		},
	},
	{
		name: "resume of a moved run writes the --jsonl-out beside it",
		args: func(t *testing.T, f *attackFixture) []string {
			f.copiedRun(t)
			os.RemoveAll(f.file("orig"))
			os.Remove(f.file("orig.jsonl"))
			os.MkdirAll(f.file("moved"), 0o755)
			if err := os.Rename(f.file("copy"), f.file("moved/run")); err != nil {
				t.Fatal(err)
			}
			f.sums = f.hashes(t)
			return []string{"run", "--resume", "--out", f.file("moved/run"), "--quiet"}
		},
		exit: 0,
		check: func(t *testing.T, f *attackFixture, r result) {
			if n := strings.Count(readFile(t, f.file("moved/orig.jsonl")), "\n"); n != 6 {
				t.Errorf("the moved run's --jsonl-out: %d lines, want 6", n)
			}
			f.absent(t, "orig.jsonl")
		},
	},

	// ---- merge trusts what a shard says ----
	{
		name: "merge of a shard marked complete whose journal was cut",
		args: func(t *testing.T, f *attackFixture) []string {
			args := f.merge(t)
			f.cutLines(t, "s1/journal.jsonl", 4)
			return args
		},
		exit:   2,
		stderr: "s1: shard 1/2 is marked complete, but its journal has 8 of its 12 rollouts",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t); f.absent(t, "merged/manifest.json") },
	},
	{
		name: "merge --partial of a shard marked complete whose journal was cut",
		args: func(t *testing.T, f *attackFixture) []string {
			args := f.merge(t, "--partial")
			f.cutLines(t, "s1/journal.jsonl", 4)
			return args
		},
		exit:   0,
		stderr: "8 of its 12 rollouts",
		check: func(t *testing.T, f *attackFixture, r result) {
			f.unchanged(t)
			mf, err := rundir.ReadManifest(f.file("merged"))
			if err != nil || mf.Complete != nil || len(mf.Short) != 1 || mf.Short[0].Records != 8 || mf.Short[0].Rollouts != 12 || mf.Short[0].Shard != 1 {
				t.Errorf("the merged manifest: %+v (%v), want not complete, shard 1 short: 8 of 12", mf, err)
			}
			if n := len(readRecords(t, f.file("merged"))); n != 20 {
				t.Errorf("%d records merged, want 20", n)
			}
		},
	},
	{
		name: "merge of a shard marked complete whose journal was cut, the input gone",
		args: func(t *testing.T, f *attackFixture) []string {
			args := f.merge(t)
			f.cutLines(t, "s1/journal.jsonl", 4)
			os.Remove(f.tasks)
			f.sums = f.hashes(t)
			return args
		},
		exit:   2,
		stderr: "s1: shard 1/2 is marked complete, but its journal has 8 of its 12 rollouts",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t); f.absent(t, "merged/manifest.json") },
	},
	{
		name: "report of shards, one marked complete whose journal was cut",
		args: func(t *testing.T, f *attackFixture) []string {
			f.shards(t)
			f.cutLines(t, "s1/journal.jsonl", 4)
			return []string{"report", f.file("s0"), f.file("s1")}
		},
		exit:   2,
		stderr: "8 of its 12 rollouts",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "merge of a shard with a record of a task past the input",
		args: func(t *testing.T, f *attackFixture) []string {
			args := f.merge(t)
			f.strayRecord(t, "s0", func(m map[string]any) { m["task_index"] = 6 })
			return args
		},
		exit:   2,
		stderr: "task 6 is past the input's 6 tasks",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t); f.absent(t, "merged/manifest.json") },
	},
	{
		name: "merge of a shard with a record of repeat 7 of 2",
		args: func(t *testing.T, f *attackFixture) []string {
			args := f.merge(t)
			f.strayRecord(t, "s0", func(m map[string]any) { m["rollout_index"] = 7 })
			return args
		},
		exit:   2,
		stderr: "repeat 7 is past --num-repeats 2",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t); f.absent(t, "merged/manifest.json") },
	},
	{
		name: "merge of a shard with a record of an arm the config never had",
		args: func(t *testing.T, f *attackFixture) []string {
			args := f.merge(t, "--partial")
			f.strayRecord(t, "s1", func(m map[string]any) { m["arm"] = "ghost" })
			return args
		},
		exit:   2,
		stderr: "arm ghost is not one of the run's arms (single, multi)",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t); f.absent(t, "merged/manifest.json") },
	},
	{
		name: "report of shards, one with a record of repeat 7",
		args: func(t *testing.T, f *attackFixture) []string {
			f.shards(t)
			f.strayRecord(t, "s1", func(m map[string]any) { m["rollout_index"] = 7 })
			return []string{"report", f.file("s0"), f.file("s1")}
		},
		exit:   2,
		stderr: "repeat 7 is past --num-repeats 2",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "merge of a shard without trajectories.jsonl",
		args: func(t *testing.T, f *attackFixture) []string {
			args := f.merge(t)
			if err := os.Remove(f.file("s1/trajectories.jsonl")); err != nil {
				t.Fatal(err)
			}
			f.sums = f.hashes(t)
			return args
		},
		exit:   2,
		stderr: "s1: 12 records, but trajectories.jsonl has the trajectories of 0 of them",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t); f.absent(t, "merged/manifest.json") },
	},

	// ---- Values from the network taken unchecked ----
	{
		name: "resource server answering 16 MiB per call, 17 calls per answer",
		args: func(t *testing.T, f *attackFixture) []string {
			model, server := floodingServers(t, 17, 16<<20)
			return []string{"run", "--input", f.tasks, "--out", filepath.Join(f.dir, "out"), "--model-url", model, "--model", "m",
				"--server", server, "--limit", "2", "--concurrency", "2", "--quiet"}
		},
		exit: 0,
		check: func(t *testing.T, f *attackFixture, r result) {
			f.unchanged(t)
			out := filepath.Join(f.dir, "out")
			st, err := os.Stat(filepath.Join(out, rundir.TrajectoriesFile))
			if err != nil {
				t.Fatal(err)
			}
			// Two rollouts, each at most --max-tool-bytes (16 MiB) of tool results and some.
			if max := int64(2 * (agent.DefaultMaxToolBytes + 1<<20)); st.Size() > max {
				t.Errorf("trajectories.jsonl is %d bytes, want at most %d", st.Size(), max)
			}
			traj := readFile(t, filepath.Join(out, rundir.TrajectoriesFile))
			if n := strings.Count(traj, `"original_bytes":16777216`); n != 2*17 {
				t.Errorf("%d tool calls record their original size of 16 MiB, want %d", n, 2*17)
			}
			for _, rec := range readRecords(t, out) {
				if rec.ToolErrors != 17 {
					t.Errorf("record %s: %d tool errors, want the 17 cut calls", rec.TaskID, rec.ToolErrors)
				}
			}
			// The run's readers still read it.
			for _, args := range [][]string{
				{"export", out, "--format", "sft", "--include-failed", "-o", filepath.Join(f.dir, "sft.jsonl")},
				{"show", out, "--task", readRecords(t, out)[0].TaskID},
				{"report", out, "--html", filepath.Join(f.dir, "report.html")},
			} {
				if r := runCLI(t, context.Background(), nil, args...); r.code != 0 {
					t.Errorf("rollout %s: exit %d: %s", strings.Join(args, " "), r.code, r.stderr)
				}
			}
		},
	},
	{
		name: "show of a rollout whose trajectory line is 16 times the readers' bound",
		args: func(t *testing.T, f *attackFixture) []string {
			// The bound set to 64 KiB, the first line's first message made 1 MiB: the line is
			// read as it streams, each text cut at MaxShownString (1000 here) with its size.
			savedLine, savedString := rundir.MaxTrajectoryLine, rundir.MaxShownString
			rundir.MaxTrajectoryLine, rundir.MaxShownString = 64<<10, 1000
			t.Cleanup(func() { rundir.MaxTrajectoryLine, rundir.MaxShownString = savedLine, savedString })
			path := f.file("run/" + rundir.TrajectoriesFile)
			lines := strings.SplitAfter(readFile(t, path), "\n")
			var l map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &l); err != nil {
				t.Fatal(err)
			}
			l["trajectory"].(map[string]any)["messages"].([]any)[0].(map[string]any)["content"] = strings.Repeat("flood ", 1<<20/6) + "END-OF-FLOOD"
			b, err := json.Marshal(l)
			if err != nil {
				t.Fatal(err)
			}
			lines[0] = string(b) + "\n"
			if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := rundir.WriteTrajIndex(f.run); err != nil {
				t.Fatal(err)
			}
			f.sums = f.hashes(t)
			return []string{"show", f.run, "--task", l["task_id"].(string), "--repeat", strconv.FormatFloat(l["rollout_index"].(float64), 'f', 0, 64), "--arm", l["arm"].(string), "--max-text", "0"}
		},
		exit: 0,
		check: func(t *testing.T, f *attackFixture, r result) {
			f.unchanged(t)
			if !strings.Contains(r.stdout, strings.Repeat("flood ", 166)+"floo"+rundir.ClipNote(int64(6*(1<<20/6)+len("END-OF-FLOOD")))) || strings.Contains(r.stdout, "END-OF-FLOOD") ||
				!strings.Contains(r.stdout, "ended: ") {
				t.Errorf("stdout %.300s ... %.300s", r.stdout, r.stdout[max(0, len(r.stdout)-300):])
			}
		},
	},
	usageAttack("usage -5000 from the model", `{"prompt_tokens":-5000,"completion_tokens":5,"total_tokens":-4995}`, false),
	usageAttack("usage -5000 from the model, with --metrics-addr", `{"prompt_tokens":-5000,"completion_tokens":5,"total_tokens":-4995}`, true),
	usageAttack("usage 9e18 from the model", `{"prompt_tokens":9000000000000000000,"completion_tokens":9000000000000000000,"total_tokens":1}`, false),
	usageAttack("usage 9e18 from the model, with --metrics-addr", `{"prompt_tokens":9000000000000000000,"completion_tokens":9000000000000000000,"total_tokens":1}`, true),

	{
		name: "report of shards, one whose journal has a line that is not a record",
		args: func(t *testing.T, f *attackFixture) []string {
			f.shards(t)
			f.insertLine(t, "s1/journal.jsonl", 3, `{"foo":1}`)
			return []string{"report", f.file("s0"), f.file("s1")}
		},
		exit:   2,
		stderr: "journal.jsonl:4: not a rollout record (no ",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "merge of shards, one whose journal has a line that is not a record",
		args: func(t *testing.T, f *attackFixture) []string {
			args := f.merge(t)
			f.insertLine(t, "s0/journal.jsonl", 12, `{"foo":1}`)
			return args
		},
		exit:   2,
		stderr: "journal.jsonl:13: not a rollout record (no ",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "resume of a run whose journal ends in a whole line that is not a record",
		args: func(t *testing.T, f *attackFixture) []string {
			f.insertLine(t, "run/journal.jsonl", 24, `{"foo":1}`)
			return []string{"run", "--resume", "--out", f.run, "--quiet"}
		},
		exit:   2,
		stderr: "journal.jsonl:25: not a rollout record (no ",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},
	{
		name: "resume --retry-failed of a run whose journal has a record without its arm",
		args: func(t *testing.T, f *attackFixture) []string {
			f.insertLine(t, "run/journal.jsonl", 5, `{"task_index":0,"rollout_index":0,"reward":1}`)
			return []string{"run", "--resume", "--retry-failed", "--out", f.run, "--quiet"}
		},
		exit:   2,
		stderr: "journal.jsonl:6: not a rollout record (no ",
		check:  func(t *testing.T, f *attackFixture, r result) { f.unchanged(t) },
	},

	// ---- Viewer and local servers ----
	{
		name: "show with a trajectories.idx claiming 2^62 entries",
		args: func(t *testing.T, f *attackFixture) []string {
			hugeTrajIndex(t, f.run)
			return []string{"show", f.run, "--task", firstRecord(t, f.run).TaskID, "--arm", "multi"}
		},
		exit: 0,
		check: func(t *testing.T, f *attackFixture, r result) {
			if !strings.Contains(r.stdout, "[assistant]") || !strings.Contains(r.stdout, "reward ") {
				t.Errorf("show printed no transcript:\n%s", r.stdout)
			}
			soundTrajIndex(t, f.run)
		},
	},
	{
		name: "report --html with a trajectories.idx claiming 2^62 entries",
		args: func(t *testing.T, f *attackFixture) []string {
			hugeTrajIndex(t, f.run)
			return []string{"report", f.run, "--html", filepath.Join(f.dir, "report.html")}
		},
		exit: 0,
		check: func(t *testing.T, f *attackFixture, r result) {
			if b := readFile(t, filepath.Join(f.dir, "report.html")); !strings.Contains(b, `<article class="transcript"`) {
				t.Errorf("report.html has no transcript (%d bytes)", len(b))
			}
			soundTrajIndex(t, f.run)
		},
	},

	// ---- Fleet and config ----
	{
		name: "fleet endpoint answering every call with a redirect",
		args: func(t *testing.T, f *attackFixture) []string {
			good := hostileModel(t, `{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}`)
			mux := http.NewServeMux()
			mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
			})
			mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, good+"/chat/completions", http.StatusTemporaryRedirect)
			})
			bad := httptest.NewServer(mux)
			t.Cleanup(bad.Close)
			cfg := filepath.Join(f.dir, "run.yaml")
			if err := os.WriteFile(cfg, []byte("endpoints:\n  - {url: "+bad.URL+"/v1, name: bad}\n  - {url: "+good+", name: good}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return []string{"run", "--config", cfg, "--input", f.tasks, "--out", filepath.Join(f.dir, "out"), "--model", "m",
				"--server", "builtin:extraction", "--num-repeats", "4", "--route", "round-robin", "--eject-after", "2", "--quiet"}
		},
		exit: 0,
		check: func(t *testing.T, f *attackFixture, r result) {
			f.unchanged(t)
			eps, events := endpointsFile(t, filepath.Join(f.dir, "out"))
			if len(eps) != 2 || eps[0].Name != "bad" {
				t.Fatalf("endpoints %+v", eps)
			}
			var failures int64
			for _, n := range eps[0].Failures {
				failures += n
			}
			if failures < 2 || eps[0].Ejections < 1 {
				t.Errorf("the redirecting endpoint: %d calls, failures %v, %d ejections; want its failures counted and an ejection", eps[0].Calls, eps[0].Failures, eps[0].Ejections)
			}
			ejected := false
			for _, e := range events {
				ejected = ejected || e.Endpoint == "bad" && e.What == "ejected"
			}
			if !ejected {
				t.Errorf("no ejection event of the redirecting endpoint: %+v", events)
			}
		},
	},
	{
		name: "api-key-env naming an unset variable",
		args: func(t *testing.T, f *attackFixture) []string {
			cfg := filepath.Join(f.dir, "run.yaml")
			if err := os.WriteFile(cfg, []byte("endpoints:\n  - url: http://127.0.0.1:1/v1\n  - url: http://127.0.0.1:2/v1\n    api-key-env: ROLLOUT_TEST_UNSET_KEY\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return []string{"run", "--config", cfg, "--input", f.tasks, "--out", filepath.Join(f.dir, "out"), "--model", "m", "--server", "builtin:extraction", "--quiet"}
		},
		exit:   2,
		stderr: "run.yaml:4: endpoints: api-key-env: ROLLOUT_TEST_UNSET_KEY is not set",
		check: func(t *testing.T, f *attackFixture, r result) {
			f.unchanged(t)
			if _, err := os.Stat(filepath.Join(f.dir, "out")); err == nil {
				t.Error("the run wrote its output directory before refusing")
			}
		},
	},
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
	// The copy's manifest names the copy's task file, so that no row reaches the base's.
	f.editManifest(t, "run", func(m *rundir.Manifest) { m.Input = f.tasks })
	f.sums = f.hashes(t)
	return f
}

// editManifest changes the manifest of the run in the row's directory dir.
func (f *attackFixture) editManifest(t *testing.T, dir string, edit func(m *rundir.Manifest)) {
	t.Helper()
	m, err := rundir.ReadManifest(f.file(dir))
	if err != nil {
		t.Fatal(err)
	}
	edit(m)
	if err := rundir.WriteManifest(f.file(dir), m); err != nil {
		t.Fatal(err)
	}
}

// hashes returns the SHA-256 of every regular file under f.dir, by path relative to it.
func (f *attackFixture) hashes(t *testing.T) map[string]string {
	t.Helper()
	sums := map[string]string{}
	f.ids = map[string]os.FileInfo{}
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
		f.ids[rel], err = os.Stat(path)
		return err
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
	ids := f.ids
	now := f.hashes(t)
	for path, sum := range f.sums {
		switch got, ok := now[path]; {
		case !ok:
			t.Errorf("%s was removed", path)
		case got != sum:
			t.Errorf("%s was changed", path)
		case !os.SameFile(ids[path], f.ids[path]):
			t.Errorf("%s was replaced (by the same bytes)", path)
		}
	}
}

// file is the path of name inside the row's directory.
func (f *attackFixture) file(name string) string { return filepath.Join(f.dir, name) }

// write writes a file of the row's directory, and counts it as an input that must not change.
func (f *attackFixture) write(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(f.file(name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	f.sums = f.hashes(t)
}

// link makes name (in the row's directory) a link to target with os.Link or os.Symlink.
func (f *attackFixture) link(t *testing.T, target, name string, link func(string, string) error) {
	t.Helper()
	if err := link(target, f.file(name)); err != nil {
		t.Fatal(err)
	}
	f.sums = f.hashes(t)
}

// absent checks that name does not exist in the row's directory.
func (f *attackFixture) absent(t *testing.T, name string) {
	t.Helper()
	if _, err := os.Stat(f.file(name)); err == nil {
		t.Errorf("%s was written", name)
	}
}

// shards runs the fixture's job as two shards, in s0 and s1 (with --jsonl-out s0.jsonl and
// s1.jsonl), and counts their files as inputs that must not change.
func (f *attackFixture) shards(t *testing.T) {
	t.Helper()
	for i := range 2 {
		s := "s" + strconv.Itoa(i)
		r := runCLI(t, context.Background(), nil, "run", "--input", f.tasks, "--out", f.file(s), "--shard", strconv.Itoa(i)+"/2",
			"--jsonl-out", f.file(s+".jsonl"), "--model-url", "builtin:sim", "--server", "builtin:extraction",
			"--arms", "single,multi", "--num-repeats", "2", "--quiet")
		if r.code != 0 {
			t.Fatalf("shard %d: exit %d: %s", i, r.code, r.stderr)
		}
	}
	f.sums = f.hashes(t)
}

// merge makes the shards and returns the command line merging them into merged, with extra.
func (f *attackFixture) merge(t *testing.T, extra ...string) []string {
	t.Helper()
	f.shards(t)
	return append([]string{"merge", "--out", f.file("merged"), f.file("s0"), f.file("s1")}, extra...)
}

// mergeInto makes the shards and returns the command line merging them into out.
func (f *attackFixture) mergeInto(t *testing.T, out string) []string {
	t.Helper()
	f.shards(t)
	return []string{"merge", "--out", out, f.file("s0"), f.file("s1")}
}

// copiedRun runs the fixture's job with --jsonl-out into orig (orig.jsonl beside it), copies
// the directory to copy (cp -r), and counts every file as an input that must not change.
func (f *attackFixture) copiedRun(t *testing.T) {
	t.Helper()
	r := runCLI(t, context.Background(), nil, "run", "--input", f.tasks, "--out", f.file("orig"), "--jsonl-out", f.file("orig.jsonl"),
		"--model-url", "builtin:sim", "--server", "builtin:extraction", "--quiet")
	if r.code != 0 {
		t.Fatalf("the original run: exit %d: %s", r.code, r.stderr)
	}
	if out, err := exec.Command("cp", "-r", f.file("orig"), f.file("copy")).CombinedOutput(); err != nil {
		t.Fatalf("cp -r: %v: %s", err, out)
	}
	os.Remove(f.file("copy/.lock"))
	f.sums = f.hashes(t)
}

// unchangedExcept is unchanged for the files whose path (relative to the row's directory)
// does not start with prefix: the ones the command may write.
func (f *attackFixture) unchangedExcept(t *testing.T, prefix string) {
	t.Helper()
	for path := range f.sums {
		if strings.HasPrefix(path, prefix) {
			delete(f.sums, path)
		}
	}
	f.unchanged(t)
}

// hostileModel starts a loopback Chat Completions endpoint that lists model m and answers every
// completion with a final answer and usage as given (a JSON object), and returns its base URL.
func hostileModel(t *testing.T, usage string) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
	})
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}],"usage":`+usage+`}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// usageAttack is a run against a model answering usage (negative or absurd token counts), with
// or without --metrics-addr, then a resume of it against the same model: neither panics, every
// rollout is invalid_output (model_error) naming the usage, and the summary's token counts are
// sound (never negative).
func usageAttack(name, usage string, metrics bool) attack {
	var model string // the hostile model's URL, for the resume
	return attack{
		name: name,
		args: func(t *testing.T, f *attackFixture) []string {
			model = hostileModel(t, usage)
			args := []string{"run", "--input", f.tasks, "--out", filepath.Join(f.dir, "out"), "--model-url", model, "--model", "m",
				"--server", "builtin:extraction", "--quiet"}
			if metrics {
				args = append(args, "--metrics-addr", "127.0.0.1:0")
			}
			return args
		},
		exit:   exitFailures,
		stderr: "the answer's usage has",
		check: func(t *testing.T, f *attackFixture, r result) {
			f.unchanged(t)
			out := filepath.Join(f.dir, "out")
			check := func(what string) {
				recs := readRecords(t, out)
				if len(recs) != 6 {
					t.Fatalf("%s: %d records, want 6", what, len(recs))
				}
				for _, rec := range recs {
					if rec.FailureClass != "model_error" || !strings.Contains(rec.Error, "usage") || rec.PromptTokens < 0 || rec.CompletionTokens < 0 {
						t.Errorf("%s: record class %q tokens %d/%d error %q; want model_error naming the usage, no negative tokens", what, rec.FailureClass, rec.PromptTokens, rec.CompletionTokens, rec.Error)
						break
					}
				}
				var sum struct {
					Prompt     *int64 `json:"prompt_tokens"`
					Completion *int64 `json:"completion_tokens"`
				}
				text := readFile(t, filepath.Join(out, "summary.json"))
				if err := json.Unmarshal([]byte(text), &sum); err != nil || sum.Prompt == nil || sum.Completion == nil {
					t.Fatalf("%s: summary.json without token counts (%v):\n%s", what, err, text)
				}
				for _, v := range []int64{*sum.Prompt, *sum.Completion} {
					if v < 0 || v > 6*wire.MaxUsageTokens {
						t.Errorf("%s: summary.json tokens %d/%d", what, *sum.Prompt, *sum.Completion)
					}
				}
			}
			check("the run")
			args := []string{"run", "--resume", "--retry-failed", "--out", out, "--model-url", model, "--quiet"}
			if metrics {
				args = append(args, "--metrics-addr", "127.0.0.1:0")
			}
			if r := runCLI(t, context.Background(), nil, args...); r.code != exitFailures {
				t.Errorf("the resume: exit %d, want %d: %s", r.code, exitFailures, r.stderr)
			}
			check("the resume")
		},
	}
}

// hugeTrajIndex replaces run's trajectories.idx with 49 bytes: the magic line, the length of
// trajectories.jsonl (so that the index claims to cover it), no arm, and an entry count of 2^62.
func hugeTrajIndex(t *testing.T, run string) {
	t.Helper()
	st, err := os.Stat(filepath.Join(run, rundir.TrajectoriesFile))
	if err != nil {
		t.Fatal(err)
	}
	b := []byte("rollout-trajectories-index 1\n")
	b = binary.LittleEndian.AppendUint64(b, uint64(st.Size()))
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint64(b, 1<<62)
	if len(b) != 49 {
		t.Fatalf("%d bytes", len(b))
	}
	if err := os.WriteFile(filepath.Join(run, rundir.TrajIndexFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// soundTrajIndex checks that run's trajectories.idx was rebuilt: it finds every record's line.
func soundTrajIndex(t *testing.T, run string) {
	t.Helper()
	if st, err := os.Stat(filepath.Join(run, rundir.TrajIndexFile)); err != nil || st.Size() <= 49 {
		t.Errorf("trajectories.idx was not rebuilt (%v)", err)
	}
}

// firstRecord is run's first record of arm multi.
func firstRecord(t *testing.T, run string) record.Record {
	t.Helper()
	for _, r := range readRecords(t, run) {
		if r.Arm == "multi" {
			return r
		}
	}
	t.Fatal("no record of arm multi")
	return record.Record{}
}

// cutLines removes the last n lines of the file name (in the row's directory), and counts the
// result as an input that must not change.
func (f *attackFixture) cutLines(t *testing.T, name string, n int) {
	t.Helper()
	lines := strings.SplitAfter(readFile(t, f.file(name)), "\n")
	lines = lines[:len(lines)-1-n] // the empty string after the last newline, and n lines
	f.write(t, name, strings.Join(lines, ""))
}

// strayRecord appends to the journal of the run in dir a copy of its first record, changed by
// edit, and counts it as an input that must not change.
func (f *attackFixture) strayRecord(t *testing.T, dir string, edit func(m map[string]any)) {
	t.Helper()
	journal := filepath.Join(dir, rundir.JournalFile)
	content := readFile(t, f.file(journal))
	var m map[string]any
	if err := json.Unmarshal([]byte(content[:strings.IndexByte(content, '\n')]), &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	line, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	f.write(t, journal, content+string(line)+"\n")
}

// insertLine inserts line after the first n lines of the file name, and counts the result as
// an input that must not change.
func (f *attackFixture) insertLine(t *testing.T, name string, n int, line string) {
	t.Helper()
	lines := strings.SplitAfter(readFile(t, f.file(name)), "\n")
	lines = append(lines[:n], append([]string{line + "\n"}, lines[n:]...)...)
	f.write(t, name, strings.Join(lines, ""))
}

// floodingServers start a loopback model that asks for calls tool calls (list_sources) in its
// first answer and answers "done" after, and a resource server answering each tool call with
// size bytes of JSON (verify: reward 0); they return the model's and the server's base URLs.
func floodingServers(t *testing.T, calls, size int) (string, string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
	})
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(string(body), `"role":"tool"`) {
			io.WriteString(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
			return
		}
		var tc []string
		for i := range calls {
			tc = append(tc, `{"id":"call_`+strconv.Itoa(i)+`","type":"function","function":{"name":"list_sources","arguments":"{\"region\":\"West\"}"}}`)
		}
		io.WriteString(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"","tool_calls":[`+strings.Join(tc, ",")+`]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	})
	model := httptest.NewServer(mux)
	t.Cleanup(model.Close)
	filler := strings.Repeat("x", size-len(`{"data":""}`))
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/seed_session", "/end_session":
			io.WriteString(w, `{}`)
		case "/verify":
			io.WriteString(w, `{"reward":0.0}`)
		default:
			w.Header().Set("Content-Length", strconv.Itoa(size))
			io.WriteString(w, `{"data":"`+filler+`"}`)
		}
	}))
	t.Cleanup(server.Close)
	return model.URL + "/v1", server.URL
}
