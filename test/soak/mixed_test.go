package soak

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/redistest"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// mixedKey is the API key of the mixed soak: the hostile model echoes it into every field of
// its answers, and it must reach no file and no output.
const mixedKey = "sk-soak-mixed-4f1c2e9a7b3d5a6c"

// TestSoakMixed runs the binary through three attacks at once, each its own process or server:
// a second `rollout run --resume` started on the --out of a running run (refused, naming the
// first's pid); the redis-server behind `rollout serve extraction` killed and started again,
// empty, in the middle of the run; and a model endpoint (`rollout sim` behind a proxy) that
// echoes the API key into the id, model, finish reason, fingerprint, an unknown field and a
// header of every answer. The run, then `--resume --retry-failed` for the rollouts whose session
// was lost, must end with every rollout recorded exactly once (0 lost, 0 duplicated), every
// reward 1 (the simulator plays each task's reference plan: a lost session scored 0 would show),
// and the key in no file of --out, the --jsonl-out file, stdout or stderr (0 leaked).
func TestSoakMixed(t *testing.T) {
	if testing.Short() {
		t.Skip("soak: runs the binary and redis-server")
	}
	n, tasks, reps, seed := soakSize(t)
	dir := t.TempDir()
	if d := os.Getenv("ROLLOUT_SOAK_OUT"); d != "" {
		dir = filepath.Join(d, "mixed")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := buildBinary(t)
	input := filepath.Join(dir, "tasks.jsonl")
	if out, err := exec.Command(bin, "gen", "extraction", "--n", strconv.Itoa(tasks), "--seed", seed, "-o", input).CombinedOutput(); err != nil {
		t.Fatalf("rollout gen: %v\n%s", err, out)
	}
	redis := redistest.StartServer(t)
	simProc := start(t, bin, "sim", "--tasks", input, "--seed", seed, "--latency", "uniform:2ms-20ms")
	serveProc := start(t, bin, "serve", "extraction", "--session-store", redis.URL)
	model := hostileProxy(t, simProc.url)

	out := filepath.Join(dir, "out")
	jsonl := filepath.Join(dir, "nemo_gym.jsonl")
	args := []string{"run", "--input", input, "--num-repeats", strconv.Itoa(reps), "--out", out, "--jsonl-out", jsonl,
		"--model-url", model.URL + "/v1", "--model", "rollout-sim", "--server", serveProc.url, "--concurrency", "32",
		"--progress-interval", "10s",
		// The Redis restart loses sessions on purpose: what is checked is one record per rollout.
		"--fail-on-error", "0.5"}
	env := append(os.Environ(), "OPENAI_API_KEY="+mixedKey)
	var texts []string
	runOnce := func(attack bool, extra ...string) {
		t.Helper()
		cmd := exec.Command(bin, append(append([]string{}, args...), extra...)...)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if attack {
			attackWhileRunning(t, bin, args, env, out, cmd.Process.Pid, redis, n)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("rollout run %v: %v\nstderr:\n%s", extra, err, tail(stderr.String(), 4000))
		}
		texts = append(texts, stdout.String(), stderr.String())
	}
	runOnce(true, "--overwrite")
	first, err := record.ReadParquet(filepath.Join(out, rundir.ParquetFile))
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	for _, r := range first {
		if r.FailureClass == record.FailResourceServer {
			lost++
		}
	}
	runOnce(false, "--resume", "--retry-failed")

	recs, err := record.ReadParquet(filepath.Join(out, rundir.ParquetFile))
	if err != nil {
		t.Fatal(err)
	}
	a := account(recs, tasks, reps)
	for _, p := range a.problems {
		t.Error(p)
	}
	zeros := 0
	for _, r := range recs {
		if !r.HasReward || r.Reward != 1 {
			zeros++
			if zeros <= 10 {
				t.Errorf("(%d, %d): reward %v, %s %s", r.TaskIndex, r.RolloutIndex, r.Reward, r.FailureClass, r.Error)
			}
		}
	}
	if got := countLines(t, jsonl); got != a.scored {
		t.Errorf("%s: %d lines for %d scored rollouts", jsonl, got, a.scored)
	}
	leaks := keyLeaks(t, mixedKey, out, jsonl, texts)
	for _, l := range leaks {
		t.Errorf("the API key leaked: %s", l)
	}
	if model.echoed() == 0 {
		t.Error("the hostile model echoed nothing")
	}
	text := fmt.Sprintf("soak mixed: %d rollouts (%d tasks x %d repeats); the Redis restart lost %d sessions (resource_server, run again by --retry-failed); "+
		"after the resume: missing %d, duplicated %d, untyped %d, not reward 1: %d; %d answers echoed the key, leaks %d",
		n, tasks, reps, lost, a.missing, a.duplicated, a.untyped, zeros, model.echoed(), len(leaks))
	t.Log(text)
	os.WriteFile(filepath.Join(dir, "soak_mixed.txt"), []byte(text+"\n"), 0o644)
}

// attackWhileRunning waits for the run (pid) to have records, starts a second run on the same
// --out (it must be refused at once, naming pid), then restarts Redis empty once a third of the
// rollouts have a record.
func attackWhileRunning(t *testing.T, bin string, args, env []string, out string, pid int, redis *redistest.Server, n int) {
	t.Helper()
	journal := filepath.Join(out, rundir.JournalFile)
	waitRecords := func(k int) {
		deadline := time.Now().Add(2 * time.Minute)
		for countLinesOr(journal) < k {
			if time.Now().After(deadline) {
				t.Fatalf("the run did not reach %d records in 2 minutes", k)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitRecords(1)
	second := exec.Command(bin, append(append([]string{}, args...), "--resume")...)
	second.Env = env
	msg, err := second.CombinedOutput()
	if code := second.ProcessState.ExitCode(); err == nil || code != 5 || !strings.Contains(string(msg), "in use by process "+strconv.Itoa(pid)) {
		t.Errorf("a second writer of --out: exit %d, want 5 (the other run may end; retry later) naming pid %d: %s", code, pid, msg)
	}
	waitRecords(n / 3)
	if err := redis.Restart(); err != nil {
		t.Fatal(err)
	}
}

// countLinesOr is the number of lines of the file at path, 0 when it cannot be read.
func countLinesOr(path string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte{'\n'})
}

// echoProxy is a model endpoint in front of another that writes the request's API key into
// every field of each answer it passes on.
type echoProxy struct {
	*httptest.Server
	count chan struct{}
}

func (p *echoProxy) echoed() int { return len(p.count) }

func hostileProxy(t *testing.T, upstream string) *echoProxy {
	p := &echoProxy{count: make(chan struct{}, 1<<20)}
	client := &http.Client{Timeout: time.Minute}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, upstream+strings.TrimPrefix(r.URL.Path, "/v1"), bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, "upstream: "+err.Error()+" (key "+key+")", http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if resp.StatusCode == http.StatusOK && json.Unmarshal(answer, &m) == nil {
			m["id"], m["model"], m["system_fingerprint"], m["x_echo"] = key, key, key, map[string]any{key: key}
			if cs, ok := m["choices"].([]any); ok {
				for _, c := range cs {
					if c, ok := c.(map[string]any); ok {
						c["finish_reason"] = key
					}
				}
			}
			answer, _ = json.Marshal(m)
			p.count <- struct{}{}
		}
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.Header().Set("X-Echo", key)
		w.WriteHeader(resp.StatusCode)
		w.Write(answer)
	}))
	t.Cleanup(p.Close)
	return p
}

// keyLeaks lists where key occurs: any file under dir (Parquet records decoded too), the file
// jsonl, and texts.
func keyLeaks(t *testing.T, key, dir, jsonl string, texts []string) []string {
	t.Helper()
	var where []string
	look := func(name string, b []byte) {
		if bytes.Contains(b, []byte(key)) {
			where = append(where, name)
		}
	}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		look(path, b)
		if filepath.Ext(path) == ".parquet" {
			recs, err := record.ReadParquet(path)
			if err != nil {
				t.Fatal(err)
			}
			j, _ := json.Marshal(recs)
			look(path+" (decoded)", j)
		}
		return nil
	})
	if b, err := os.ReadFile(jsonl); err == nil {
		look(jsonl, b)
	}
	for i, s := range texts {
		look(fmt.Sprintf("output %d of the runs", i), []byte(s))
	}
	return where
}
