package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/rundir"
)

const slurmDir = "../../deploy/slurm"

// runScript runs a deploy/slurm script with bash and env, returning its exit code and output.
func runScript(t *testing.T, script string, env ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(slurmDir, script))
	cmd.Env = append(os.Environ(), env...)
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}

// submit.sh with an sbatch that records what it is asked: the array of SHARDS tasks, then
// the merge depending on it with afterany; a bad SHARDS is one line, exit 2, nothing submitted.
func TestSlurmSubmit(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	fake := `#!/bin/sh
echo "$*" >> "$FAKE/calls"
n=$(cat "$FAKE/n" 2>/dev/null || echo 700); echo $((n + 1)) > "$FAKE/n"
echo "$n;cluster1"
`
	if err := os.WriteFile(filepath.Join(dir, "sbatch"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + dir + ":" + os.Getenv("PATH"), "FAKE=" + dir}
	code, out := runScript(t, "submit.sh", append(env, "SHARDS=4", "SBATCH_ARGS=--partition=gpu")...)
	if code != 0 || out != "700 701\n" {
		t.Fatalf("exit %d: %q", code, out)
	}
	calls := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "calls"))), "\n")
	if len(calls) != 2 || !strings.Contains(calls[0], "--array=0-3") || !strings.HasSuffix(calls[0], "rollout-array.sbatch") ||
		!strings.Contains(calls[1], "--dependency=afterany:700 ") || !strings.HasSuffix(calls[1], "merge.sbatch") || !strings.Contains(calls[1], "--partition=gpu") {
		t.Errorf("sbatch calls:\n%s", strings.Join(calls, "\n"))
	}
	os.Remove(filepath.Join(dir, "calls"))
	code, out = runScript(t, "submit.sh", append(env, "SHARDS=four")...)
	if code != 2 || out != "submit.sh: SHARDS=four: want a whole number from 1\n" {
		t.Errorf("SHARDS=four: exit %d: %q", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "calls")); err == nil {
		t.Error("a bad SHARDS submitted a job")
	}
}

// The array's tasks, run as Slurm runs them (SLURM_ARRAY_TASK_ID, _MIN, _COUNT), then the
// merge: one run of every rollout. A shard whose first attempt exits 5 is run again and
// finishes; one exiting 4 is not; with a shard missing the merge falls back to --partial.
func TestSlurmArrayAndMerge(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	bin := buildRollout(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "run")
	// A rollout that exits 5 on its first call for shard 1 (a bad minute), then is rollout.
	wrapper := filepath.Join(dir, "rollout")
	script := `#!/bin/sh
case "$*" in *shard-1*)
	if [ ! -e "` + dir + `/flaked" ]; then touch "` + dir + `/flaked"; exit 5; fi ;;
esac
exec ` + bin + ` "$@"
`
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	base := []string{"SHARDS=3", "INPUT=" + headLines(t, extractionData, 7), "OUT=" + out, "MODEL_URL=builtin:sim",
		"SERVER=builtin:extraction", "RUN_ARGS=--quiet --num-repeats 2", "ROLLOUT=" + wrapper, "RETRY_DELAY=0",
		"SLURM_ARRAY_TASK_MIN=1", "SLURM_ARRAY_TASK_COUNT=3"}
	for i := range 3 {
		code, log := runScript(t, "rollout-array.sbatch", append(base, "SLURM_ARRAY_TASK_ID="+strconv.Itoa(i+1))...)
		if code != 0 {
			t.Fatalf("array task %d: exit %d:\n%s", i+1, code, log)
		}
		if i == 1 && !strings.Contains(log, "rollout-array: shard 1: exit 5 (transient); again in 0 s") {
			t.Errorf("shard 1 was not retried after exit 5:\n%s", log)
		}
	}
	code, log := runScript(t, "merge.sbatch", "OUT="+out, "ROLLOUT="+bin)
	if code != 0 || strings.Contains(log, "--partial") {
		t.Fatalf("merge: exit %d:\n%s", code, log)
	}
	mf, err := rundir.ReadManifest(filepath.Join(out, "merged"))
	if err != nil || mf.Complete == nil {
		t.Fatalf("the merged run is not marked complete: %v", err)
	}
	if n := len(readRecords(t, filepath.Join(out, "merged"))); n != 7*2 {
		t.Errorf("merged %d rollouts, want %d (7 tasks, 2 repeats)", n, 7*2)
	}

	// A model failure past --fail-on-error (exit 4) is not retried.
	fail := filepath.Join(dir, "fail4")
	os.WriteFile(fail, []byte("#!/bin/sh\necho called >> "+dir+"/fail4.calls\nexit 4\n"), 0o755)
	code, log = runScript(t, "rollout-array.sbatch", append(base, "SLURM_ARRAY_TASK_ID=1", "ROLLOUT="+fail)...)
	if calls := readFile(t, filepath.Join(dir, "fail4.calls")); code != 4 || calls != "called\n" {
		t.Errorf("exit 4: script exit %d after %d calls:\n%s", code, strings.Count(calls, "\n"), log)
	}

	// Shard 2 lost: the merge of what is there, recorded as incomplete.
	if err := os.RemoveAll(filepath.Join(out, "shard-2")); err != nil {
		t.Fatal(err)
	}
	code, log = runScript(t, "merge.sbatch", "OUT="+out, "ROLLOUT="+bin)
	if code != 0 || !strings.Contains(log, "merging those that did (--partial)") || !strings.Contains(log, "2/3") {
		t.Fatalf("partial merge: exit %d:\n%s", code, log)
	}
	if mf, err := rundir.ReadManifest(filepath.Join(out, "merged")); err != nil || mf.Complete != nil {
		t.Errorf("a partial merge marked complete: %v", err)
	}
}

// Over-sharding on Slurm: CLAIM=5 over an array of 2 tasks, run at once as Slurm runs them:
// each task takes shards until all 5 are done, each shard is run by one task, and the merge
// (unchanged) merges the 5 shard directories into the whole run.
func TestSlurmArrayClaimed(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	bin := buildRollout(t)
	out := filepath.Join(t.TempDir(), "run")
	base := []string{"SHARDS=2", "CLAIM=5", "INPUT=" + headLines(t, extractionData, 7), "OUT=" + out, "MODEL_URL=builtin:sim",
		"SERVER=builtin:extraction", "RUN_ARGS=--quiet --num-repeats 2", "ROLLOUT=" + bin, "SLURM_ARRAY_TASK_COUNT=2"}
	type result struct {
		code int
		log  string
	}
	results := make(chan result, 2)
	for i := range 2 {
		go func() {
			code, log := runScript(t, "rollout-array.sbatch", append(base, "SLURM_ARRAY_TASK_ID="+strconv.Itoa(i))...)
			results <- result{code, log}
		}()
	}
	var logs []string
	for range 2 {
		r := <-results
		if r.code != 0 {
			t.Fatalf("array task: exit %d:\n%s", r.code, r.log)
		}
		logs = append(logs, r.log)
	}
	by := claimedBy(logs)
	for i := range 5 {
		if by[strconv.Itoa(i)+"/5"] != 1 {
			t.Errorf("shard %d/5 claimed %d times:\n%s", i, by[strconv.Itoa(i)+"/5"], strings.Join(logs, "\n"))
		}
	}
	code, log := runScript(t, "merge.sbatch", "OUT="+out, "ROLLOUT="+bin)
	if code != 0 || strings.Contains(log, "--partial") || !strings.Contains(log, "merged 5 of 5 shards") {
		t.Fatalf("merge: exit %d:\n%s", code, log)
	}
	if n := len(readRecords(t, filepath.Join(out, "merged"))); n != 7*2 {
		t.Errorf("merged %d rollouts, want %d (7 tasks, 2 repeats)", n, 7*2)
	}
}
