package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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
	for end := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(url + "/"); err == nil {
			resp.Body.Close()
			return url
		}
		if time.Now().After(end) {
			t.Fatalf("examples/cart did not answer on %s", url)
		}
	}
}

// The Go example resource server of docs/own-benchmark.md, end to end as the guide runs it:
// under 100 lines, built and started as its own process, its task file's reference plans
// proved by validate --oracle, a run against the simulator scoring 1, and a model that errs
// scoring less; a session never seeded and bad arguments are answered as the guide says.
func TestCartExampleEndToEnd(t *testing.T) {
	src := readFile(t, "../../examples/cart/main.go")
	if n := strings.Count(src, "\n"); n >= 100 {
		t.Errorf("examples/cart/main.go has %d lines; the guide promises under 100", n)
	}
	url := startCart(t)
	tasks := "../../examples/cart/tasks.jsonl"

	r := runCLI(t, context.Background(), nil, "validate", tasks, "--oracle", "--server", url)
	if r.code != 0 || !strings.Contains(r.stderr, "4 tasks, 4 with a reference plan: 0 problems") || !strings.Contains(r.stderr, "oracle: 4 tasks, 16 rollouts") {
		t.Fatalf("validate --oracle: exit %d\n%s%s", r.code, r.stdout, r.stderr)
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
		if rec.Reward != 1 || rec.FailureClass != "" || rec.ToolCalls < 2 {
			t.Errorf("task %s: reward %v, class %q, %d tool calls", rec.TaskID, rec.Reward, rec.FailureClass, rec.ToolCalls)
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
		if rec.Reward != 0 || !rec.HasReward {
			t.Errorf("task %s with wrong arguments: reward %v (has %v)", rec.TaskID, rec.Reward, rec.HasReward)
		}
	}

	// The protocol's failure answers, straight over HTTP.
	post := func(path, body string) (int, string) {
		resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			b.WriteString(sc.Text())
		}
		return resp.StatusCode, b.String()
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
}

// The Python example (NeMo Gym's base classes) compiles and serves the Go example's tools and
// fields. It is not run: NeMo Gym cannot be installed here (see examples/cart_nemo_gym/app.py).
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
