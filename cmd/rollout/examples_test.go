package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/testnet"
)

// startCart builds examples/cart and starts it as a process of its own; it returns its URL.
func startCart(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cart")
	if out, err := exec.Command("go", "build", "-o", bin, "../../examples/cart").CombinedOutput(); err != nil {
		t.Fatalf("go build examples/cart: %v\n%s", err, out)
	}
	url := testnet.ClosedPort(t) // a port free a moment ago
	cmd := exec.Command(bin, "--addr", strings.TrimPrefix(url, "http://"))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitLive(t, url, "examples/cart", nil)
	return url
}

// waitLive waits for a server's GET / to answer; it fails the test when the server's process
// has exited (exited closed) or a minute has passed.
func waitLive(t *testing.T, url, name string, exited <-chan struct{}) {
	t.Helper()
	for end := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(url + "/"); err == nil {
			resp.Body.Close()
			return
		}
		select {
		case <-exited:
			t.Fatalf("%s exited before answering on %s", name, url)
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("%s did not answer on %s", name, url)
		}
	}
}

// The Go example resource server of docs/own-benchmark.md, end to end as the guide runs it:
// under 100 lines, built and started as its own process, then checked by checkCartServer.
func TestCartExampleEndToEnd(t *testing.T) {
	src := readFile(t, "../../examples/cart/main.go")
	if n := strings.Count(src, "\n"); n >= 100 {
		t.Errorf("examples/cart/main.go has %d lines; the guide promises under 100", n)
	}
	checkCartServer(t, startCart(t))
}

// checkCartServer checks a cart resource server (either example) as docs/own-benchmark.md
// uses it: its task file's reference plans proved by validate --oracle, a run against the
// simulator scoring 1 on every task with the order's total as its reward component, a model
// that gets every argument wrong scoring 0, and the failure answers of the protocol (a session
// never seeded, a missing argument, truncated JSON). It returns a POST helper for more.
func checkCartServer(t *testing.T, url string) (post func(path, body string) (int, string)) {
	t.Helper()
	tasks := "../../examples/cart/tasks.jsonl"
	r := runCLI(t, context.Background(), nil, "validate", tasks, "--oracle", "--server", url)
	if r.code != 0 || !strings.Contains(r.stderr, "4 tasks, 4 with a reference plan: 0 problems") || !strings.Contains(r.stderr, "oracle: 4 tasks, 16 rollouts") {
		t.Fatalf("validate --oracle: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	want := map[string]float64{} // each task's expected_total, the total a right order has
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, tasks)), "\n") {
		var row struct {
			ID    string  `json:"id"`
			Total float64 `json:"expected_total"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		want[row.ID] = row.Total
	}
	out := t.TempDir()
	r = runCLI(t, context.Background(), nil, "run", "--input", tasks, "--server", url, "--model-url", "builtin:sim", "--out", out, "--overwrite", "--quiet")
	if r.code != 0 {
		t.Fatalf("run: exit %d: %s", r.code, r.stderr)
	}
	recs := readRecords(t, out)
	if len(recs) != 4 {
		t.Fatalf("%d records", len(recs))
	}
	for _, rec := range recs {
		if rec.Reward != 1 || !rec.HasReward || rec.FailureClass != "" || rec.ToolCalls < 2 || rec.RewardComponents["ordered_total"] != want[rec.TaskID] {
			t.Errorf("task %s: reward %v (has %v), class %q, %d tool calls, components %v (ordered_total %v wanted)",
				rec.TaskID, rec.Reward, rec.HasReward, rec.FailureClass, rec.ToolCalls, rec.RewardComponents, want[rec.TaskID])
		}
	}
	// A model that gets every argument wrong places no right order.
	bad := t.TempDir()
	r = runCLI(t, context.Background(), nil, "run", "--input", tasks, "--server", url, "--model-url", "builtin:sim", "--sim-wrong-argument", "1",
		"--out", bad, "--quiet", "--fail-on-error", "1")
	if r.code != 0 {
		t.Fatalf("run with wrong arguments: exit %d: %s", r.code, r.stderr)
	}
	for _, rec := range readRecords(t, bad) {
		if rec.Reward != 0 || !rec.HasReward || rec.FailureClass != "" {
			t.Errorf("task %s with wrong arguments: reward %v (has %v), class %q", rec.TaskID, rec.Reward, rec.HasReward, rec.FailureClass)
		}
	}

	// The protocol's failure answers, straight over HTTP.
	post = func(path, body string) (int, string) {
		resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("/add_to_cart", `{"item": "apple", "quantity": 1}`); code != http.StatusConflict || !strings.Contains(body, "call seed_session first") {
		t.Errorf("add_to_cart on a session never seeded: %d %s", code, body)
	}
	if code, body := post("/add_to_cart", `{"item": "apple"}`); code != http.StatusUnprocessableEntity || !strings.Contains(body, "quantity") {
		t.Errorf("add_to_cart without quantity: %d %s", code, body)
	}
	if code, body := post("/seed_session", `{"responses_create_params": {"input": []}}`); code != http.StatusUnprocessableEntity || !strings.Contains(body, "prices") {
		t.Errorf("seed_session without prices: %d %s", code, body)
	}
	if code, body := post("/add_to_cart", `{"item": "apple", "quantity": 1`); code < 400 || code >= 500 {
		t.Errorf("add_to_cart with truncated JSON: %d %s", code, body)
	}
	return post
}

// nemoGymPython returns a Python 3 that can run examples/cart_nemo_gym on the NeMo Gym files
// vendored in testdata/nemo_gym: Debian's /usr/bin/python3 with python3-fastapi,
// python3-uvicorn, python3-pydantic (1.x, which the shim there is written for),
// python3-itsdangerous and python3-yaml, or a python3 on PATH that has them. Without one the
// test is skipped, saying what to install, except under CI=true (.ci/run installs them), where
// it fails.
func nemoGymPython(t *testing.T) string {
	t.Helper()
	const probe = "import fastapi, uvicorn, itsdangerous, yaml, pydantic; assert pydantic.VERSION.startswith('1.'), pydantic.VERSION"
	var tried []string
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		path, err := exec.LookPath(py)
		if err != nil {
			continue
		}
		out, err := exec.Command(path, "-c", probe).CombinedOutput()
		if err == nil {
			return path
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		tried = append(tried, path+": "+lines[len(lines)-1])
	}
	msg := "no python3 with fastapi, uvicorn, pydantic 1.x, itsdangerous and yaml (apt-get install python3-fastapi python3-uvicorn python3-pydantic python3-itsdangerous python3-yaml): " + strings.Join(tried, "; ")
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// startCartNemoGym starts examples/cart_nemo_gym/app.py as its own process by the example's
// serve.sh: on NeMo Gym's base classes vendored in testdata/nemo_gym, with its config handed
// over as ng_run hands it to a server (configs/cart.yaml with a host and port). It returns the
// server's URL and the process.
func startCartNemoGym(t *testing.T, py string) (string, *exec.Cmd) {
	t.Helper()
	url := testnet.ClosedPort(t)
	cmd := exec.Command("../../examples/cart_nemo_gym/serve.sh", "--addr", strings.TrimPrefix(url, "http://"))
	cmd.Env = append(os.Environ(), "PYTHON="+py)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("app.py's output:\n%s", logs.String())
		}
	})
	waitLive(t, url, "examples/cart_nemo_gym/app.py", exited)
	return url, cmd
}

// The Python example resource server of docs/own-benchmark.md, run: app.py on NeMo Gym's own
// SimpleResourcesServer (vendored, with a shim for what Debian's packages lack), started as
// NeMo Gym starts a server and checked by checkCartServer as the Go one is; then a /verify
// body NeMo Gym's models refuse, and, the server killed, a run against it that fails as an
// infrastructure failure (exit 5) with nothing scored.
func TestCartNemoGymExampleEndToEnd(t *testing.T) {
	py := nemoGymPython(t)
	url, server := startCartNemoGym(t, py)
	post := checkCartServer(t, url)
	if code, body := post("/verify", `{"responses_create_params": {"input": [], "temprature": 0}, "response": {}, "expected_total": 1}`); code != http.StatusUnprocessableEntity ||
		!strings.Contains(body, `"temprature"`) || !strings.Contains(body, `"created_at"`) {
		t.Errorf("verify with an unknown request field and an empty response: %d %s", code, body)
	}

	// The server killed: nothing is scored, and the run says the infrastructure failed.
	server.Process.Signal(syscall.SIGKILL)
	down := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", "../../examples/cart/tasks.jsonl", "--server", url, "--model-url", "builtin:sim", "--out", down, "--quiet")
	if r.code != 5 {
		t.Errorf("run against the killed server: exit %d, want 5\n%s", r.code, r.stderr)
	}
}

// The Python example (NeMo Gym's base classes) compiles and serves the Go example's tools and
// fields; this holds with any python3, where TestCartNemoGymExampleEndToEnd needs Debian's
// FastAPI packages.
func TestCartNemoGymExampleMatchesTasks(t *testing.T) {
	src := readFile(t, "../../examples/cart_nemo_gym/app.py")
	var tools []string
	for _, m := range regexp.MustCompile(`app\.post\("/(\w+)"\)`).FindAllStringSubmatch(src, -1) {
		tools = append(tools, m[1])
	}
	var row struct {
		Params struct {
			Tools []struct{ Name string } `json:"tools"`
		} `json:"responses_create_params"`
	}
	first, _, _ := strings.Cut(readFile(t, "../../examples/cart/tasks.jsonl"), "\n")
	if err := json.Unmarshal([]byte(first), &row); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, tool := range row.Params.Tools {
		want = append(want, tool.Name)
	}
	slices.Sort(tools)
	slices.Sort(want)
	if !slices.Equal(tools, want) {
		t.Errorf("app.py serves %v, the tasks offer %v", tools, want)
	}
	for _, field := range []string{"prices: Dict[str, int]", "expected_total: int", "SimpleResourcesServer", "SESSION_ID_KEY"} {
		if !strings.Contains(src, field) {
			t.Errorf("app.py lacks %q", field)
		}
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3: app.py not compiled")
	}
	cache := t.TempDir()
	cmd := exec.Command(py, "-c", "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)",
		"../../examples/cart_nemo_gym/app.py", filepath.Join(cache, "app.pyc"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("app.py does not compile: %v\n%s", err, out)
	}
}
