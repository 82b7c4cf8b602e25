package export_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/export"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// Bad inputs are errors that name the file, line or option, and leave no output behind.
func TestExportErrors(t *testing.T) {
	good := writeRun(t, 2, []rollout{{task: 0, repeat: 0, reward: 1}, {task: 1, repeat: 0, reward: 0}})

	tornTraj := writeRun(t, 2, []rollout{{task: 0, repeat: 0, reward: 1}, {task: 1, repeat: 0, reward: 0}})
	p := filepath.Join(tornTraj, "trajectories.jsonl")
	data, _ := os.ReadFile(p)
	lines := strings.SplitAfter(string(data), "\n")
	os.WriteFile(p, []byte(lines[0]+"{\"task_index\": 1, broken\n"), 0o644)

	noTasks := writeRun(t, 1, []rollout{{task: 0, repeat: 0, reward: 1}})
	os.Remove(filepath.Join(filepath.Dir(noTasks), "tasks.jsonl"))

	badJournal := writeRun(t, 1, []rollout{{task: 0, repeat: 0, reward: 1}})
	j := filepath.Join(badJournal, "journal.jsonl")
	jd, _ := os.ReadFile(j)
	os.WriteFile(j, append([]byte("not json\n"), jd...), 0o644)

	for _, tc := range []struct {
		name string
		opt  export.Options
		want string
	}{
		{"no dir", export.Options{Format: "rl", Output: "x.jsonl"}, "no run directory"},
		{"format", export.Options{Dirs: []string{good}, Format: "dpo", Output: "x.jsonl"}, `--format "dpo"`},
		{"extension", export.Options{Dirs: []string{good}, Format: "rl", Output: "x.csv"}, `unknown extension ".csv"`},
		{"margin", export.Options{Dirs: []string{good}, Format: "preference", Output: "x.jsonl", MinMargin: -1}, "--min-margin"},
		{"not a run", export.Options{Dirs: []string{t.TempDir()}, Format: "rl"}, "not a run directory (no journal.jsonl)"},
		{"trajectory line", export.Options{Dirs: []string{tornTraj}, Format: "rl"}, "trajectories.jsonl:2: not a trajectory line"},
		{"task file", export.Options{Dirs: []string{noTasks}, Format: "rl"}, "give it with --input"},
		{"journal line", export.Options{Dirs: []string{badJournal}, Format: "sft"}, "journal.jsonl:1: not a record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			opt := tc.opt
			if opt.Output == "" {
				opt.Output = filepath.Join(out, "out.parquet")
			} else {
				opt.Output = filepath.Join(out, opt.Output)
			}
			_, err := export.Run(context.Background(), opt)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
			if left, _ := os.ReadDir(out); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}

	// --input names the task file when the manifest's is gone.
	input := filepath.Join(t.TempDir(), "tasks.jsonl")
	os.WriteFile(input, []byte(taskRow(0)+"\n"), 0o644)
	rep, err := export.Run(context.Background(), export.Options{Dirs: []string{noTasks}, Format: "rl", Input: input, Output: filepath.Join(t.TempDir(), "rl.jsonl")})
	if err != nil || rep.Rows != 1 {
		t.Fatalf("with --input: %v, %+v", err, rep)
	}

	// A cancelled export stops and leaves nothing.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := t.TempDir()
	if _, err := export.Run(ctx, export.Options{Dirs: []string{good}, Format: "rl", Output: filepath.Join(out, "rl.jsonl")}); err == nil {
		t.Error("a cancelled export succeeded")
	}
	if left, _ := os.ReadDir(out); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// Shards of one run: their rollouts form one group per task, each directory read in turn.
func TestShards(t *testing.T) {
	a := writeRun(t, 2, []rollout{{task: 0, repeat: 0, reward: 1}, {task: 0, repeat: 1, reward: 0}})
	b := writeRun(t, 2, []rollout{{task: 0, repeat: 2, reward: 1}, {task: 1, repeat: 0, reward: 0.5}, {task: 0, repeat: 3, reward: 1}})
	out := filepath.Join(t.TempDir(), "rl.jsonl")
	rep := exportTo(t, export.Options{Dirs: []string{a, b}, Format: "rl", Output: out})
	if rep.Rows != 5 || rep.Groups != 2 || rep.Read != 5 || rep.DuplicateKeys != 0 {
		t.Fatalf("report %+v", rep)
	}
	norm, _ := advantages([]float64{1, 0, 1, 1})
	i := 0
	for _, r := range readJSONL[rlLine](t, out) {
		if r.TaskID != "t0" {
			continue
		}
		if r.GroupSize != 4 || r.Advantage != r.Advantage || abs(r.Advantage-norm[i]) > 1e-9 {
			t.Errorf("t0 repeat %d: group size %d advantage %v, want 4, %v", r.Repeat, r.GroupSize, r.Advantage, norm[i])
		}
		i++
	}
	if i != 4 {
		t.Errorf("%d rows of t0", i)
	}
	// Best of group across shards: the first highest reward, in the first shard.
	sft := filepath.Join(t.TempDir(), "sft.jsonl")
	rep = exportTo(t, export.Options{Dirs: []string{a, b}, Format: "sft", BestOfGroup: true, Output: sft})
	if rep.Rows != 2 {
		t.Errorf("best of group over shards: %d rows, want 2", rep.Rows)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// The task file named in the manifest was rewritten after the run (another seed): every
// format refuses, naming the file and both hashes, rather than join this run's rollouts to
// other tasks' prompts and tools; nothing is written.
func TestTaskFileChanged(t *testing.T) {
	dir := writeRun(t, 3, baseRun)
	m, err := rundir.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := m.InputSHA256
	if err := os.WriteFile(m.Input, []byte(taskRow(1)+"\n"+taskRow(0)+"\n"+taskRow(2)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	now, err := rundir.HashFile(m.Input)
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range export.Formats {
		out := filepath.Join(t.TempDir(), "out.jsonl")
		_, err := export.Run(context.Background(), export.Options{Dirs: []string{dir}, Format: format, Output: out})
		var ie *export.InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), now) || !strings.Contains(err.Error(), m.Input) {
			t.Errorf("%s: %v, want an input error naming %s, %s and %s", format, err, m.Input, want, now)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s: %s written", format, out)
		}
	}
}

// Two runs of the same tasks (not shards: the same keys in both): the export says how many
// rollouts repeat a key of an earlier directory, and that their groups pool the runs.
func TestRunsOfSameTasksWarned(t *testing.T) {
	rs := []rollout{{task: 0, repeat: 0, reward: 1}, {task: 0, repeat: 1, reward: 0}, {task: 1, repeat: 0, reward: 1}}
	a, b := writeRun(t, 2, rs), writeRun(t, 2, rs)
	rep := exportTo(t, export.Options{Dirs: []string{a, b}, Format: "rl", Output: filepath.Join(t.TempDir(), "rl.jsonl")})
	if rep.DuplicateKeys != 3 || rep.Rows != 6 {
		t.Fatalf("duplicates %d rows %d, want 3 and 6", rep.DuplicateKeys, rep.Rows)
	}
	var printed strings.Builder
	rep.Print(&printed)
	if !strings.Contains(printed.String(), "warning: 3 rollouts have the key (task, repeat, arm) of a rollout of an earlier directory") {
		t.Errorf("no warning:\n%s", printed.String())
	}
}

// A trajectory line longer than MaxRowBytes (one of 3 MiB, read past as it streams without
// being held, its key after the long member; one of 200 KB) leaves its rollout out, named on
// Warnings with its line and size and counted in the report; the other rows are exported.
func TestExportLeavesOutRowsOverTheBound(t *testing.T) {
	dir := writeRun(t, 4, []rollout{{task: 0, reward: 1}, {task: 1, reward: 0}, {task: 2, reward: 1}, {task: 3, reward: 0}})
	p := filepath.Join(dir, rundir.TrajectoriesFile)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d trajectory lines", len(lines))
	}
	lines[1] = `{"pad":"` + strings.Repeat("x", 3<<20) + `",` + lines[1][1:]
	lines[2] = strings.TrimSuffix(lines[2], "}\n") + `,"pad":"` + strings.Repeat("y", 200_000) + `"}` + "\n"
	if err := os.WriteFile(p, []byte(strings.Join(lines, "")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var warn strings.Builder
	out := filepath.Join(t.TempDir(), "sft.jsonl")
	rep, err := export.Run(context.Background(), export.Options{Dirs: []string{dir}, Format: "sft", Output: out, MaxRowBytes: 64 << 10, Warnings: &warn})
	if err != nil {
		t.Fatal(err)
	}
	rows := readJSONL[map[string]any](t, out)
	if rep.Rows != 2 || len(rows) != 2 || rep.Dropped[export.DropTooLarge] != 2 {
		t.Fatalf("%d rows (%d in the file), dropped %v", rep.Rows, len(rows), rep.Dropped)
	}
	for _, want := range []string{
		fmt.Sprintf("trajectories.jsonl:2: a trajectory line of %d bytes, over --max-row-bytes 65536: task 1 repeat 0", len(lines[1])-1),
		fmt.Sprintf("trajectories.jsonl:3: a trajectory line of %d bytes, over --max-row-bytes 65536: task 2 repeat 0", len(lines[2])-1),
	} {
		if !strings.Contains(warn.String(), want) {
			t.Errorf("warnings %q lack %q", warn.String(), want)
		}
	}
	var summary strings.Builder
	rep.Print(&summary)
	if !strings.Contains(summary.String(), "dropped 2: "+export.DropTooLarge) {
		t.Errorf("summary: %s", summary.String())
	}
	// The default bound holds them.
	rep, err = export.Run(context.Background(), export.Options{Dirs: []string{dir}, Format: "sft", Output: out, Overwrite: true})
	if err != nil || rep.Rows != 4 {
		t.Fatalf("default bound: %v, %+v", err, rep)
	}
}

// A NeMo Gym line (the run's verify answer, which a nemo-gym row holds) longer than
// MaxRowBytes, its keys after the long member, leaves its rollout out, named; the other rows
// carry their verify answers.
func TestExportNemoGymLeavesOutLinesOverTheBound(t *testing.T) {
	dir := writeRun(t, 3, []rollout{{task: 0, reward: 1}, {task: 1, reward: 0}, {task: 2, reward: 1}})
	data, err := os.ReadFile(filepath.Join(dir, rundir.TrajectoriesFile))
	if err != nil {
		t.Fatal(err)
	}
	var ng strings.Builder
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		var k struct {
			Task    int64  `json:"task_index"`
			Rollout int64  `json:"rollout_index"`
			Arm     string `json:"arm"`
		}
		if err := json.Unmarshal([]byte(line), &k); err != nil {
			t.Fatal(err)
		}
		pad := "short"
		if i == 1 {
			pad = strings.Repeat("z", 2<<20)
		}
		fmt.Fprintf(&ng, `{"pad":%q,"reward":%d.5,"_ng_task_index":%d,"_ng_rollout_index":%d,"_ng_arm":%q}`+"\n", pad, i, k.Task, k.Rollout, k.Arm)
	}
	if err := os.WriteFile(filepath.Join(dir, rundir.NemoGymFile), []byte(ng.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var warn strings.Builder
	out := filepath.Join(t.TempDir(), "ng.jsonl")
	rep, err := export.Run(context.Background(), export.Options{Dirs: []string{dir}, Format: "nemo-gym", Output: out, MaxRowBytes: 1 << 20, Warnings: &warn})
	if err != nil {
		t.Fatal(err)
	}
	rows := readJSONL[map[string]any](t, out)
	if rep.Rows != 2 || len(rows) != 2 || rep.Dropped[export.DropTooLarge] != 1 || rows[0]["reward"] != 0.5 || rows[1]["reward"] != 2.5 {
		t.Fatalf("%d rows %v, dropped %v", rep.Rows, rows, rep.Dropped)
	}
	if want := fmt.Sprintf("nemo_gym.jsonl:2: a NeMo Gym line of %d bytes, over --max-row-bytes 1048576: task 1 repeat 0", len(strings.Split(ng.String(), "\n")[1])); !strings.Contains(warn.String(), want) {
		t.Errorf("warnings %q lack %q", warn.String(), want)
	}
}
