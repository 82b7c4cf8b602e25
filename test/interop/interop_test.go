// Package interop_test runs rollout against a real inference server: llama.cpp's llama-server,
// built from the llama.cpp source that the npm package node-llama-cpp ships
// (build-llama-server.sh), with tiny Qwen2-architecture models that gen_models.py writes
// (random weights, the real Qwen2 tokenizer and Qwen2.5 chat template; some wired by hand to
// answer with a tool call, a JSON-mode call or nothing). Rewards are not the point: the
// protocol is.
//
// `make interop` builds (or reuses) the server and runs this package with
// ROLLOUT_INTEROP_DIR set to the build's cache directory. Without it (as in `make test`) every
// test skips, saying so; `make interop` itself fails under CI=true when it cannot build the
// server.
package interop_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/testnet"
)

// DirEnv names the directory build-llama-server.sh prints: bin/llama-server, the vocab, the
// chat template and gguf-py.
const DirEnv = "ROLLOUT_INTEROP_DIR"

// suite is what every test needs, set up once: the server binary, the models and a rollout
// binary built from this tree.
type suite struct {
	llama, models, rollout string
}

var (
	setupOnce sync.Once
	setup     suite
	setupErr  error
	tmpRoot   string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if tmpRoot != "" {
		os.RemoveAll(tmpRoot)
	}
	os.Exit(code)
}

// env returns the suite, skipping the test loudly when no server was built, and failing it
// when the set-up failed.
func env(t *testing.T) suite {
	t.Helper()
	dir := os.Getenv(DirEnv)
	if dir == "" {
		t.Skip("INTEROP SUITE NOT RUN: " + DirEnv + " is not set; `make interop` builds llama.cpp's llama-server " +
			"(cmake, g++, git, npm, /usr/bin/python3 with numpy and yaml) and runs this suite against it")
	}
	setupOnce.Do(func() { setup, setupErr = prepare(dir) })
	if setupErr != nil {
		t.Fatalf("interop set-up: %v", setupErr)
	}
	return setup
}

func prepare(dir string) (suite, error) {
	s := suite{llama: filepath.Join(dir, "bin", "llama-server")}
	if _, err := os.Stat(s.llama); err != nil {
		return s, fmt.Errorf("%s=%s has no bin/llama-server (run test/interop/build-llama-server.sh): %w", DirEnv, dir, err)
	}
	var err error
	if tmpRoot, err = os.MkdirTemp("", "rollout-interop-"); err != nil {
		return s, err
	}
	s.models = filepath.Join(tmpRoot, "models")
	python := os.Getenv("ROLLOUT_INTEROP_PYTHON")
	if python == "" {
		python = "/usr/bin/python3" // Debian's, with Debian's python3-numpy
	}
	if out, err := exec.Command(python, "gen_models.py", dir, s.models).CombinedOutput(); err != nil {
		return s, fmt.Errorf("gen_models.py: %v\n%s", err, out)
	}
	s.rollout = filepath.Join(tmpRoot, "rollout")
	if out, err := exec.Command("go", "build", "-o", s.rollout, "../../cmd/rollout").CombinedOutput(); err != nil {
		return s, fmt.Errorf("go build ./cmd/rollout: %v\n%s", err, out)
	}
	return s, nil
}

// server is a running llama-server.
type server struct {
	base string // http://127.0.0.1:PORT
	log  *testnet.Buffer
}

// url is the OpenAI-compatible base URL.
func (s *server) url() string { return s.base + "/v1" }

// start starts llama-server on model (a file of the suite's models, e.g. "noise.gguf", or an
// absolute path) on a free loopback port with the tool-call template (--jinja) and metrics,
// plus args; it is killed when the test ends.
func (s suite) start(t *testing.T, model string, args ...string) *server {
	t.Helper()
	var lastErr error
	for range 3 { // the free port may be taken before the server binds it
		port, err := testnet.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		srv := &server{base: "http://127.0.0.1:" + strconv.Itoa(port), log: &testnet.Buffer{}}
		ctx, cancel := context.WithCancel(context.Background())
		path := model
		if !filepath.IsAbs(path) {
			path = filepath.Join(s.models, model)
		}
		cmd := exec.CommandContext(ctx, s.llama, append([]string{"-m", path,
			"--host", "127.0.0.1", "--port", strconv.Itoa(port), "--jinja", "--metrics", "--threads", "2"}, args...)...)
		cmd.Stdout, cmd.Stderr = srv.log, srv.log
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		stop := func() { cancel(); <-done }
		if err := waitHealthy(ctx, srv.base, done); err != nil {
			stop()
			lastErr = fmt.Errorf("llama-server %s: %v\n%s", model, err, tail(srv.log.String(), 2000))
			continue
		}
		t.Cleanup(func() {
			stop()
			if t.Failed() {
				t.Logf("llama-server %s log (end):\n%s", model, tail(srv.log.String(), 3000))
			}
		})
		return srv
	}
	t.Fatal(lastErr)
	return nil
}

// waitHealthy polls GET /health until it answers 200 (the model is loaded).
func waitHealthy(ctx context.Context, base string, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("exited: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("not healthy: %v", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// run runs `rollout run` with args (and --quiet, a fresh --out) and returns the output
// directory and what it printed; a failed run fails the test.
func (s suite) run(t *testing.T, args ...string) (string, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute) // the tiny agent's runs on a loaded machine
	defer cancel()
	cmd := exec.CommandContext(ctx, s.rollout, append([]string{"run", "--quiet", "--out", out}, args...)...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		t.Fatalf("rollout run %s: %v\n%s", strings.Join(args, " "), err, buf.String())
	}
	return out, buf.String()
}

// record is the part of a trajectories.jsonl line the checks read.
type record struct {
	TaskIndex    int    `json:"task_index"`
	RolloutIndex int    `json:"rollout_index"`
	Arm          string `json:"arm"`
	Trajectory   struct {
		Messages []struct {
			Role       string `json:"role"`
			Content    string `json:"content"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
		Rounds []struct {
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
				CachedTokens     int `json:"cached_tokens"`
			} `json:"usage"`
			FinishReason string `json:"finish_reason"`
			Endpoint     string `json:"endpoint"`
			ToolCalls    []struct {
				CallID string `json:"call_id"`
				Name   string `json:"name"`
				Status int    `json:"status"`
				Failed bool   `json:"failed"`
			} `json:"tool_calls"`
		} `json:"rounds"`
		Context *struct {
			Strategy string `json:"strategy"`
			Rounds   []struct {
				Messages        int `json:"messages"`
				Bytes           int `json:"bytes"`
				RemovedMessages int `json:"removed_messages"`
				PromptTokens    int `json:"prompt_tokens"`
			} `json:"rounds"`
			Briefings []struct {
				Round int    `json:"round"`
				Text  string `json:"text"`
				Usage struct {
					PromptTokens     int `json:"prompt_tokens"`
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			} `json:"briefings"`
		} `json:"context"`
		Termination    string `json:"termination"`
		FailureClass   string `json:"failure_class"`
		Error          string `json:"error"`
		InvalidAnswers int    `json:"invalid_answers"`
	} `json:"trajectory"`
}

func (r *record) key() string { return fmt.Sprintf("task %d rollout %d", r.TaskIndex, r.RolloutIndex) }

// records reads out/trajectories.jsonl.
func records(t *testing.T, out string) []record {
	t.Helper()
	return readJSONL[record](t, filepath.Join(out, "trajectories.jsonl"))
}

// readJSONL decodes each line of the file at path.
func readJSONL[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var r T
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: line %d: %v", filepath.Base(path), len(rows)+1, err)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// summary reads out/summary.json.
func summary(t *testing.T, out string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// counterTasks writes the first n NeMo Gym example_session_state_mgmt rows of
// data/nemo_gym_examples.jsonl to a file and returns its path and the rows' initial_count.
func counterTasks(t *testing.T, n int) (string, []int) {
	t.Helper()
	data, err := os.ReadFile("../../data/nemo_gym_examples.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	var counts []int
	for _, line := range strings.Split(string(data), "\n") {
		var row struct {
			AgentRef struct {
				Name string `json:"name"`
			} `json:"agent_ref"`
			InitialCount int `json:"initial_count"`
		}
		if json.Unmarshal([]byte(line), &row) != nil || row.AgentRef.Name != "example_session_state_mgmt" {
			continue
		}
		rows = append(rows, line)
		counts = append(counts, row.InitialCount)
		if len(rows) == n {
			break
		}
	}
	if len(rows) != n {
		t.Fatalf("%d example_session_state_mgmt rows, want %d", len(rows), n)
	}
	path := filepath.Join(t.TempDir(), "counter.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(rows, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, counts
}

// writeTasks writes rows to a task file.
func writeTasks(t *testing.T, rows ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(rows, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const counterServer = "example_session_state_mgmt=builtin:example_session_state_mgmt"

// metrics reads the server's Prometheus counters (llamacpp:NAME → value).
func (s *server) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		if f, err := strconv.ParseFloat(value, 64); err == nil {
			m[strings.TrimPrefix(name, "llamacpp:")] = f
		}
	}
	return m
}

// chat posts a Chat Completions request body as it is and returns the first choice's content.
func (s *server) chat(t *testing.T, body string) string {
	t.Helper()
	resp, err := http.Post(s.url()+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var c struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(data, &c) != nil || len(c.Choices) == 0 {
		t.Fatalf("POST %s: HTTP %d: %s", body, resp.StatusCode, data)
	}
	return c.Choices[0].Message.Content
}

// Native tool calls: llama-server's parser turns the model's Hermes <tool_call> block into
// tool_calls, rollout makes the calls against the resource server, and the history with the
// assistant's tool calls and the tool results is accepted round after round (32 rollouts at
// once on 4 slots). The usage in the records equals the server's own token counters.
func TestNativeToolCalls(t *testing.T) {
	s := env(t)
	srv := s.start(t, "toolcall.gguf", "-c", "4096", "--parallel", "4")
	tasks, counts := counterTasks(t, 4)
	out, _ := s.run(t, "--input", tasks, "--num-repeats", "8", "--concurrency", "32", "--max-rounds", "3",
		"--model-url", srv.url(), "--model", "toolcall", "--server", counterServer, "--seed", "5")
	recs := records(t, out)
	if len(recs) != 32 {
		t.Fatalf("%d records, want 32", len(recs))
	}
	var prompt, completion, cached int
	for _, r := range recs {
		tr := &r.Trajectory
		if tr.Termination != "max_rounds" || tr.FailureClass != "" || len(tr.Rounds) != 3 {
			t.Fatalf("%s: termination %q class %q rounds %d (%s)", r.key(), tr.Termination, tr.FailureClass, len(tr.Rounds), tr.Error)
		}
		for i, rd := range tr.Rounds {
			if rd.FinishReason != "tool_calls" || len(rd.ToolCalls) != 1 || rd.ToolCalls[0].Name != "get_counter_value" ||
				rd.ToolCalls[0].Status != http.StatusOK || rd.ToolCalls[0].Failed {
				t.Fatalf("%s round %d: finish %q calls %+v", r.key(), i, rd.FinishReason, rd.ToolCalls)
			}
			prompt += rd.Usage.PromptTokens
			completion += rd.Usage.CompletionTokens
			cached += rd.Usage.CachedTokens
		}
		want := fmt.Sprintf(`{"count": %d}`, counts[r.TaskIndex])
		var results int
		for _, m := range tr.Messages {
			if m.Role == "tool" {
				results++
				if m.Content != want {
					t.Fatalf("%s: tool result %q, want %q from the resource server", r.key(), m.Content, want)
				}
			}
		}
		if results != 3 {
			t.Fatalf("%s: %d tool results, want 3", r.key(), results)
		}
	}
	m := srv.metrics(t)
	if float64(completion) != m["tokens_predicted_total"] || float64(cached) != m["prompt_tokens_cached_total"] ||
		float64(prompt) != m["prompt_tokens_total"]+m["prompt_tokens_cached_total"] {
		t.Fatalf("records: %d prompt (%d cached), %d completion tokens; server: %v prompt processed, %v cached, %v predicted",
			prompt, cached, completion, m["prompt_tokens_total"], m["prompt_tokens_cached_total"], m["tokens_predicted_total"])
	}
	sum := summary(t, out)
	if sum["prompt_tokens"] != float64(prompt) || sum["completion_tokens"] != float64(completion) {
		t.Fatalf("summary.json tokens %v %v, records %d %d", sum["prompt_tokens"], sum["completion_tokens"], prompt, completion)
	}
	t.Logf("32 rollouts × 3 rounds of native tool calls; %d prompt (%d cached) and %d completion tokens, as the server counted", prompt, cached, completion)
}

// The same seeds give the same records: two runs of 32 concurrent rollouts on 4 slots of the
// random-weights model (the server's default sampling) agree on every message and token
// count. cached_tokens is left out: it says which slot's prompt cache a request hit, which
// depends on the scheduling. Flash attention is off: with it (llama.cpp's default, "auto")
// 28 of 32 rollouts agreed, its kernel's results depending on the batch. Every answer is cut
// by --max-tokens: they end as length, not completed.
func TestSameSeedSameRecords(t *testing.T) {
	s := env(t)
	srv := s.start(t, "noise.gguf", "-c", "4096", "--parallel", "4", "-fa", "off")
	tasks, _ := counterTasks(t, 4)
	args := []string{"--input", tasks, "--num-repeats", "8", "--concurrency", "32", "--max-rounds", "3", "--max-tokens", "16",
		"--model-url", srv.url(), "--model", "noise", "--server", counterServer, "--seed", "11"}
	type result struct {
		texts  []string
		tokens [][2]int
		ends   string
	}
	read := func(out string) map[string]result {
		recs := records(t, out)
		if len(recs) != 32 {
			t.Fatalf("%d records, want 32", len(recs))
		}
		m := map[string]result{}
		for _, r := range recs {
			var res result
			for _, msg := range r.Trajectory.Messages {
				res.texts = append(res.texts, msg.Role+": "+msg.Content)
			}
			for _, rd := range r.Trajectory.Rounds {
				res.tokens = append(res.tokens, [2]int{rd.Usage.PromptTokens, rd.Usage.CompletionTokens})
				if rd.FinishReason != "length" {
					t.Fatalf("%s: finish reason %q, want length", r.key(), rd.FinishReason)
				}
			}
			res.ends = r.Trajectory.Termination + " " + r.Trajectory.FailureClass
			if res.ends != "length " {
				t.Fatalf("%s: termination %q class %q (%s), want length", r.key(), r.Trajectory.Termination, r.Trajectory.FailureClass, r.Trajectory.Error)
			}
			m[r.key()] = res
		}
		return m
	}
	out1, _ := s.run(t, args...)
	out2, _ := s.run(t, args...)
	a, b := read(out1), read(out2)
	distinct := map[string]bool{}
	for k, ra := range a {
		rb := b[k]
		if strings.Join(ra.texts, "\x00") != strings.Join(rb.texts, "\x00") || fmt.Sprint(ra.tokens) != fmt.Sprint(rb.tokens) {
			t.Errorf("%s differs between the runs:\n%q %v\n%q %v", k, ra.texts, ra.tokens, rb.texts, rb.tokens)
		}
		distinct[ra.texts[len(ra.texts)-1]] = true
	}
	if len(distinct) < 16 {
		t.Fatalf("%d distinct answers in 32 rollouts: the seeds do not reach the sampler", len(distinct))
	}
}

// --temperature 0 gets the server's greedy output: the answer in the record is what a direct
// request with a literal "temperature": 0 gets (under another seed too), and not what
// 1e-45 (go-openai's stand-in for 0, which llama.cpp takes as a positive temperature) gets.
func TestTemperatureZeroIsGreedy(t *testing.T) {
	s := env(t)
	srv := s.start(t, "noise.gguf", "-c", "2048", "--parallel", "2")
	tasks := writeTasks(t, `{"responses_create_params":{"input":[{"role":"user","content":"Say something."}]}}`)
	out, _ := s.run(t, "--input", tasks, "--temperature", "0", "--max-tokens", "12", "--seed", "3",
		"--model-url", srv.url(), "--model", "noise", "--server", "builtin:example_single_tool_call")
	recs := records(t, out)
	if len(recs) != 1 || len(recs[0].Trajectory.Rounds) != 1 {
		t.Fatalf("records %+v", recs)
	}
	msgs := recs[0].Trajectory.Messages
	got := msgs[len(msgs)-1].Content
	request := func(temperature string, seed int) string {
		return srv.chat(t, `{"model":"noise","messages":[{"role":"user","content":"Say something."}],"max_tokens":12,"seed":`+
			strconv.Itoa(seed)+`,"temperature":`+temperature+`}`)
	}
	greedy := request("0", 3)
	if got != greedy || request("0", 99) != greedy {
		t.Fatalf("rollout's answer at temperature 0 %q, the server's greedy answer %q", got, greedy)
	}
	if tiny := request("1e-45", 3); tiny == greedy {
		t.Fatalf("temperature 1e-45 gave the greedy answer %q too: this check cannot tell them apart", tiny)
	}
}

// JSON tool mode sends a response_format that the server compiles into a grammar: even the
// random-weights model answers only valid JSON of the answer schema (no answer refused as
// invalid; answers are completed or cut by max_tokens), and the model that answers a JSON-mode
// call gets its calls made against the resource server.
func TestJSONModeResponseFormat(t *testing.T) {
	s := env(t)
	noise := s.start(t, "noise.gguf", "-c", "4096", "--parallel", "4")
	tasks, counts := counterTasks(t, 4)
	out, _ := s.run(t, "--input", tasks, "--num-repeats", "4", "--concurrency", "16", "--max-rounds", "2", "--max-tokens", "64",
		"--tool-mode", "json", "--model-url", noise.url(), "--model", "noise", "--server", counterServer, "--seed", "5")
	recs := records(t, out)
	if len(recs) != 16 {
		t.Fatalf("%d records, want 16", len(recs))
	}
	ends := map[string]int{}
	for _, r := range recs {
		tr := &r.Trajectory
		ends[tr.Termination]++
		if tr.InvalidAnswers != 0 || tr.FailureClass != "" {
			t.Errorf("%s: %d invalid answers, class %q (%s): %q", r.key(), tr.InvalidAnswers, tr.FailureClass, tr.Error, tr.Messages[len(tr.Messages)-1].Content)
		}
	}
	t.Logf("random weights under the grammar: %v", ends)

	calls := s.start(t, "jsoncall.gguf", "-c", "4096", "--parallel", "4")
	out, _ = s.run(t, "--input", tasks, "--concurrency", "4", "--max-rounds", "2",
		"--tool-mode", "json", "--model-url", calls.url(), "--model", "jsoncall", "--server", counterServer, "--seed", "5")
	for _, r := range records(t, out) {
		tr := &r.Trajectory
		if tr.Termination != "max_rounds" || tr.InvalidAnswers != 0 || len(tr.Rounds) != 2 {
			t.Fatalf("%s: termination %q invalid %d rounds %d (%s)", r.key(), tr.Termination, tr.InvalidAnswers, len(tr.Rounds), tr.Error)
		}
		for i, rd := range tr.Rounds {
			if len(rd.ToolCalls) != 1 || rd.ToolCalls[0].Name != "get_counter_value" || rd.ToolCalls[0].Status != http.StatusOK {
				t.Fatalf("%s round %d: calls %+v", r.key(), i, rd.ToolCalls)
			}
		}
		want := fmt.Sprintf(`{"count": %d}`, counts[r.TaskIndex])
		if last := tr.Messages[len(tr.Messages)-1]; last.Role != "user" || !strings.Contains(last.Content, want) {
			t.Fatalf("%s: last message %+v, want the tool response %s", r.key(), last, want)
		}
	}
}

// A prompt longer than the server's context ends the rollout with termination context_length
// (verified, no failure class), with llama-server's own message in the record.
func TestContextOverflow(t *testing.T) {
	s := env(t)
	srv := s.start(t, "noise.gguf", "-c", "256", "--parallel", "1")
	long := strings.Repeat("count the apples and the pears again ", 60)
	tasks := writeTasks(t, `{"agent_ref":{"type":"responses_api_agents","name":"example_session_state_mgmt"},"responses_create_params":{"input":[{"role":"user","content":"`+long+`"}]},"expected_count":1,"initial_count":0}`)
	out, _ := s.run(t, "--input", tasks, "--max-tokens", "16", "--model-url", srv.url(), "--model", "noise", "--server", counterServer)
	recs := records(t, out)
	tr := &recs[0].Trajectory
	if tr.Termination != "context_length" || tr.FailureClass != "" {
		t.Fatalf("termination %q class %q (%s)", tr.Termination, tr.FailureClass, tr.Error)
	}
	if !strings.Contains(tr.Error, "HTTP 400 exceed_context_size_error: request (") || !strings.Contains(tr.Error, "exceeds the available context size (256 tokens)") {
		t.Fatalf("error %q", tr.Error)
	}
	if sum := summary(t, out); sum["scored"] != float64(1) {
		t.Fatalf("summary %v: the rollout was not verified", sum)
	}
}

// A tool call cut off by --max-tokens (arguments "{") ends the rollout with termination
// length: the call is not made and never sent back, so the server never answers 500.
func TestTruncatedToolCall(t *testing.T) {
	s := env(t)
	srv := s.start(t, "toolcall.gguf", "-c", "4096", "--parallel", "4")
	tasks, _ := counterTasks(t, 4)
	out, _ := s.run(t, "--input", tasks, "--max-tokens", "10", "--max-rounds", "3",
		"--model-url", srv.url(), "--model", "toolcall", "--server", counterServer)
	for _, r := range records(t, out) {
		tr := &r.Trajectory
		if tr.Termination != "length" || tr.FailureClass != "" || len(tr.Rounds) != 1 || tr.Rounds[0].FinishReason != "length" || len(tr.Rounds[0].ToolCalls) != 0 {
			t.Fatalf("%s: termination %q class %q rounds %+v (%s)", r.key(), tr.Termination, tr.FailureClass, tr.Rounds, tr.Error)
		}
		if !strings.Contains(tr.Error, "cut off by max_tokens in a tool call") {
			t.Fatalf("%s: error %q", r.key(), tr.Error)
		}
	}
	if m := srv.metrics(t); m["tokens_predicted_total"] != 4*10 {
		t.Fatalf("server predicted %v tokens, want one cut answer per rollout (40)", m["tokens_predicted_total"])
	}
}

// The model that answers nothing: the workflow policy refuses its empty final answers and asks
// again, so the empty assistant messages go back to the server, which accepts them (it answers
// 400 to an assistant message with neither content nor tool calls). The rollouts go on until
// the conversation no longer fits the slot's context.
func TestEmptyAnswers(t *testing.T) {
	s := env(t)
	srv := s.start(t, "empty.gguf", "-c", "2048", "--parallel", "2")
	out, _ := s.run(t, "--input", "../../data/workflow.jsonl", "--limit", "2", "--arms", "workflow", "--steps", "../../data/workflow.steps.json",
		"--model-url", srv.url(), "--model", "empty", "--server", "builtin:workflow", "--seed", "1")
	for _, r := range records(t, out) {
		tr := &r.Trajectory
		if tr.FailureClass != "" || strings.Contains(tr.Error, "HTTP 400 invalid_request_error") || len(tr.Rounds) < 2 {
			t.Fatalf("%s: termination %q class %q rounds %d (%s)", r.key(), tr.Termination, tr.FailureClass, len(tr.Rounds), tr.Error)
		}
		for i, rd := range tr.Rounds {
			if rd.FinishReason != "stop" || rd.Usage.CompletionTokens != 1 {
				t.Fatalf("%s round %d: finish %q usage %+v", r.key(), i, rd.FinishReason, rd.Usage)
			}
		}
	}
}
