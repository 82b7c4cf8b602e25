package interop_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record/recordtest"
)

// pathCall is one request a pathProxy passed on: its path, body and the answer.
type pathCall struct {
	path         string
	body, answer []byte
}

// pathProxy is a loopback proxy in front of a server that keeps every request, whatever its
// path, in order; edit, when set, rewrites each answer body of a path.
type pathProxy struct {
	url   string
	mu    sync.Mutex
	calls []pathCall
}

func newPathProxy(t *testing.T, upstream string, edit func(path string, answer []byte) []byte) *pathProxy {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p := &pathProxy{}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		answer, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		req := resp.Request
		var body []byte
		if req.GetBody != nil {
			if rc, err := req.GetBody(); err == nil {
				body, _ = io.ReadAll(rc)
			}
		}
		if edit != nil {
			answer = edit(req.URL.Path, answer)
		}
		p.mu.Lock()
		p.calls = append(p.calls, pathCall{req.URL.Path, body, answer})
		p.mu.Unlock()
		resp.Body = io.NopCloser(bytes.NewReader(answer))
		resp.ContentLength = int64(len(answer))
		resp.Header.Del("Content-Length")
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.url = srv.URL + "/v1"
	return p
}

// capturedRollout is a trajectories.jsonl line's rounds with their tokens.
type capturedRollout struct {
	TaskIndex    int `json:"task_index"`
	RolloutIndex int `json:"rollout_index"`
	Trajectory   struct {
		Rounds []struct {
			Prompt []int32   `json:"prompt_token_ids"`
			Gen    []int32   `json:"generation_token_ids"`
			LP     []float64 `json:"generation_log_probs"`
			Note   string    `json:"token_note"`
			// Endpoint is the pool's endpoint of the round (several --model-url).
			Endpoint string `json:"endpoint"`
			Usage    struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		} `json:"rounds"`
	} `json:"trajectory"`
}

// --capture-tokens against llama-server keeps each rollout's token ids contiguous: every call
// after the first has prompt ids that begin with the previous call's prompt ids and generated
// ids, as NeMo RL's nemo_gym postprocessing asserts. The wired toolcall model writes its tool
// call as compact JSON, which the Qwen2.5 template re-renders with spaces, so the server's
// chat endpoint (a re-rendering of the history) breaks contiguity at the first generated id;
// the token-in calls keep it. The tiny agent is a learned model on a held-out extraction task
// (six calls, content and tool calls of its own). The rounds are checked against the server's
// own answers: each /completion prompt is a round's prompt ids, and the ids after the previous
// call's are the server's /tokenize of its /apply-template rendering of the request, from the
// end of the previous answer on; the first call's prompt is that rendering whole.
func TestCaptureTokensContiguousLlama(t *testing.T) {
	s := env(t)
	t.Run("toolcall", func(t *testing.T) {
		srv := s.start(t, "toolcall.gguf", "-c", "4096", "--parallel", "2")
		proxy := newPathProxy(t, srv.base, nil)
		tasks, _ := counterTasks(t, 2)
		out, _ := s.run(t, "--input", tasks, "--num-repeats", "2", "--concurrency", "1", "--max-rounds", "3", "--capture-tokens",
			"--model-url", proxy.url, "--model", "toolcall", "--server", counterServer, "--seed", "5")
		checkTokenIn(t, s, srv, proxy, out, 8, true)
		checkTextTokens(t, s, out, filepath.Join(os.Getenv(DirEnv), "models", "templates", "Qwen-Qwen2.5-7B-Instruct.jinja"))
	})
	t.Run("tiny-agent", func(t *testing.T) {
		srv := s.startTiny(t, 1)
		proxy := newPathProxy(t, srv.base, nil)
		out, _ := s.run(t, "--input", heldOut(t, 1), "--arms", "multi", "--concurrency", "1", "--temperature", "0", "--max-tokens", "256",
			"--capture-tokens", "--model-url", proxy.url, "--model", "tiny-agent", "--server", "builtin:extraction", "--seed", "1")
		checkTokenIn(t, s, srv, proxy, out, 3, false)
	})
}

// With two llama-servers behind several --model-url (a pool), --capture-tokens still keeps
// each rollout's token ids contiguous: the token-in calls go to the rollout's own server, at
// its root. Each rollout's rounds name one endpoint, every call after a first one begins with
// the previous call's prompt and generated ids (NeMo RL's check), with no token note, and each
// server was sent one model call (/v1/chat/completions, or /completion once the run has seen
// llama-server) for each round of the rollouts it served, and no root path under /v1.
func TestCaptureTokensContiguousLlamaPool(t *testing.T) {
	s := env(t)
	var proxies []*pathProxy
	for range 2 {
		srv := s.start(t, "toolcall.gguf", "-c", "4096", "--parallel", "2")
		proxies = append(proxies, newPathProxy(t, srv.base, nil))
	}
	tasks, _ := counterTasks(t, 2)
	out, _ := s.run(t, "--input", tasks, "--num-repeats", "2", "--concurrency", "2", "--max-rounds", "3", "--capture-tokens",
		"--model-url", proxies[0].url+","+proxies[1].url, "--model", "toolcall", "--server", counterServer, "--seed", "5")
	rounds := map[string]int{} // endpoint name -> rounds
	for _, r := range readJSONL[capturedRollout](t, filepath.Join(out, "trajectories.jsonl")) {
		var seen []int32
		for i, rd := range r.Trajectory.Rounds {
			where := fmt.Sprintf("task %d rollout %d call %d", r.TaskIndex, r.RolloutIndex, i)
			if rd.Endpoint == "" || rd.Endpoint != r.Trajectory.Rounds[0].Endpoint {
				t.Errorf("%s: endpoint %q, the first call's %q", where, rd.Endpoint, r.Trajectory.Rounds[0].Endpoint)
			}
			if len(rd.Gen) == 0 || len(rd.LP) != len(rd.Gen) || len(rd.Prompt) != rd.Usage.PromptTokens || rd.Note != "" {
				t.Errorf("%s: %d prompt ids (usage %d), %d generation ids, %d log-probs, note %q", where, len(rd.Prompt), rd.Usage.PromptTokens, len(rd.Gen), len(rd.LP), rd.Note)
			}
			rounds[rd.Endpoint]++
			if i > 0 {
				if len(rd.Prompt) < len(seen) || !slices.Equal(rd.Prompt[:len(seen)], seen) {
					t.Errorf("%s: prompt ids do not begin with the previous call's prompt and generated ids (first difference at %d of %d)", where, firstDiff(rd.Prompt, seen), len(seen))
				}
			}
			seen = append(slices.Clone(rd.Prompt), rd.Gen...)
		}
	}
	tokenIn := 0
	for i, p := range proxies {
		name := strings.TrimSuffix(strings.TrimPrefix(p.url, "http://"), "/v1")
		calls := 0
		p.mu.Lock()
		for _, c := range p.calls {
			switch c.path {
			case "/completion":
				tokenIn++
				calls++
			case "/v1/chat/completions":
				calls++
			}
			if strings.HasPrefix(c.path, "/v1/") && c.path != "/v1/chat/completions" && c.path != "/v1/models" {
				t.Errorf("server %d was sent %s", i, c.path)
			}
		}
		p.mu.Unlock()
		if calls != rounds[name] {
			t.Errorf("server %d (%s) was sent %d model calls; the rollouts it served have %d rounds", i, name, calls, rounds[name])
		}
	}
	// Which server a task lands on is affinity's hash of its key, which holds the input's path
	// (a temporary directory): both tasks may land on one server, and the other is then checked
	// to have been sent no model call. TestLlamaTokenInPool checks, with a fixed key, that a
	// rollout's calls all go to its own server and none to the other.
	if tokenIn < 4 || len(rounds) == 0 {
		t.Errorf("%d calls by token ids, rounds by endpoint %v: too few to check", tokenIn, rounds)
	}
	t.Logf("rounds by endpoint %v, %d of them by token ids", rounds, tokenIn)
}

// checkTokenIn checks the run in out, made through proxy one call at a time: at least
// minLater calls after a first one, all contiguous; reRendered: the server's re-rendering
// would have broken some of them.
func checkTokenIn(t *testing.T, s suite, srv *server, proxy *pathProxy, out string, minLater int, reRender bool) {
	t.Helper()
	var eos struct {
		Tokens []int32 `json:"tokens"`
	}
	srv.post(t, "/tokenize", []byte(`{"content":"<|im_end|>","parse_special":true}`), &eos)
	if len(eos.Tokens) != 1 {
		t.Fatalf("<|im_end|> tokenizes to %v", eos.Tokens)
	}

	// The model calls in order (one at a time: --concurrency 1), each with the chat request it
	// answers: the last one sent to the chat endpoint or rendered by /apply-template with the
	// generation prompt.
	type modelCall struct {
		chat   []byte // the chat request
		prompt []int32
		viaIn  bool // made by /completion
	}
	var calls []modelCall
	var chat []byte
	proxy.mu.Lock()
	for _, c := range proxy.calls {
		switch c.path {
		case "/apply-template":
			var b struct {
				AddGenerationPrompt *bool `json:"add_generation_prompt"`
			}
			json.Unmarshal(c.body, &b)
			if b.AddGenerationPrompt == nil || *b.AddGenerationPrompt {
				chat = c.body
			}
		case "/v1/chat/completions":
			calls = append(calls, modelCall{chat: c.body})
		case "/completion":
			var b struct {
				Prompt []int32 `json:"prompt"`
			}
			if err := json.Unmarshal(c.body, &b); err != nil || len(b.Prompt) == 0 {
				t.Fatalf("/completion was sent no token ids: %.300s", c.body)
			}
			calls = append(calls, modelCall{chat: chat, prompt: b.Prompt, viaIn: true})
		}
	}
	proxy.mu.Unlock()

	lines := readJSONL[capturedRollout](t, filepath.Join(out, "trajectories.jsonl"))
	k, checked, breaks, reRendered, tokenIn := 0, 0, 0, 0, 0
	for _, r := range lines {
		var seen []int32
		for i, rd := range r.Trajectory.Rounds {
			where := func() string { return fmt.Sprintf("task %d rollout %d call %d", r.TaskIndex, r.RolloutIndex, i) }
			if len(rd.Gen) == 0 || len(rd.LP) != len(rd.Gen) || len(rd.Prompt) != rd.Usage.PromptTokens || len(rd.Gen) != rd.Usage.CompletionTokens || rd.Note != "" {
				t.Errorf("%s: %d prompt ids (usage %d), %d generation ids (usage %d), %d log-probs, note %q",
					where(), len(rd.Prompt), rd.Usage.PromptTokens, len(rd.Gen), rd.Usage.CompletionTokens, len(rd.LP), rd.Note)
			}
			for _, lp := range rd.LP {
				if math.IsNaN(lp) || math.IsInf(lp, 0) || lp > 0 {
					t.Errorf("%s: log-prob %v", where(), lp)
				}
			}
			if k >= len(calls) {
				t.Fatalf("%d rounds in the trajectories, %d model calls through the proxy", k+1, len(calls))
			}
			mc := calls[k]
			k++
			if mc.viaIn {
				tokenIn++
				if !slices.Equal(mc.prompt, rd.Prompt) {
					t.Errorf("%s: the round's prompt ids are not what /completion was sent", where())
				}
			}
			// The server's own rendering of the chat request, tokenized.
			tpl := tokenizeRequest(t, srv, stripTokens1(t, mc.chat))
			if i == 0 {
				if !slices.Equal(rd.Prompt, tpl) {
					t.Errorf("%s: the first call's prompt ids are not the server's /tokenize of its rendering (%d ids, %d)", where(), len(rd.Prompt), len(tpl))
				}
			} else {
				checked++
				if len(rd.Prompt) < len(seen) || !slices.Equal(rd.Prompt[:len(seen)], seen) {
					breaks++
					t.Errorf("%s: prompt ids do not begin with the previous call's prompt and generated ids (first difference at %d of %d)",
						where(), firstDiff(rd.Prompt, seen), len(seen))
				} else {
					tail := rd.Prompt[len(seen):]
					at := len(tpl) - len(tail)
					if len(tail) == 0 || at < 1 || !slices.Equal(tpl[at:], tail) || tpl[at-1] != eos.Tokens[0] {
						t.Errorf("%s: the %d ids after the previous call's are not the server's rendering from the end of the previous answer on", where(), len(tail))
					}
				}
				if len(tpl) < len(seen) || !slices.Equal(tpl[:len(seen)], seen) {
					reRendered++
				}
			}
			seen = append(slices.Clone(rd.Prompt), rd.Gen...)
		}
	}
	if k != len(calls) {
		t.Errorf("%d rounds in the trajectories, %d model calls through the proxy", k, len(calls))
	}
	t.Logf("%d model calls, %d by token ids (/completion); %d of %d calls after a first one contiguous; the server's re-rendering would have broken %d of them",
		len(calls), tokenIn, checked-breaks, checked, reRendered)
	if checked < minLater || tokenIn < checked {
		t.Fatalf("%d calls after a first one, %d by token ids: too few to check", checked, tokenIn)
	}
	if reRender && reRendered == 0 {
		t.Errorf("the server's re-rendering broke no call: the check cannot tell the token-in prompts from the chat endpoint's")
	}

	// The exports: nemo-gym through NeMo RL's postprocessing, rl's calls and sequence.
	ng := filepath.Join(t.TempDir(), "ng.jsonl")
	rl := filepath.Join(t.TempDir(), "rl.jsonl")
	for _, e := range [][]string{{"nemo-gym", ng}, {"rl", rl}} {
		got, err := exec.Command(s.rollout, "export", out, "--format", e[0], "-o", e[1]).CombinedOutput()
		if err != nil || bytes.Contains(got, []byte("contiguous")) {
			t.Fatalf("export %s: %v\n%s", e[0], err, got)
		}
	}
	items := 0
	for i, line := range bytes.Split(bytes.TrimSpace(readFile(t, ng)), []byte("\n")) {
		n, err := recordtest.NemoRLPostprocess(line)
		if err != nil {
			t.Fatalf("%s:%d: %v", ng, i+1, err)
		}
		items += n
	}
	if items != len(calls) {
		t.Errorf("NeMo RL takes %d trainable items of %d model calls", items, len(calls))
	}
	for i, row := range readJSONL[struct {
		Calls []struct {
			Prompt []int32 `json:"prompt_token_ids"`
			Gen    []int32 `json:"generation_token_ids"`
		} `json:"calls"`
		InputIDs []int32 `json:"input_ids"`
		LossMask []int32 `json:"loss_mask"`
	}](t, rl) {
		if len(row.Calls) == 0 {
			t.Fatalf("%s:%d: no calls", rl, i+1)
		}
		var seen []int32
		for j, c := range row.Calls {
			if !slices.Equal(c.Prompt[:min(len(seen), len(c.Prompt))], seen) || len(c.Prompt) < len(seen) {
				t.Errorf("%s:%d: call %d is not contiguous", rl, i+1, j)
			}
			seen = append(slices.Clone(c.Prompt), c.Gen...)
		}
		if !slices.Equal(row.InputIDs, seen) || len(row.LossMask) != len(seen) {
			t.Errorf("%s:%d: input_ids (%d) and loss_mask (%d) are not the last call's %d ids", rl, i+1, len(row.InputIDs), len(row.LossMask), len(seen))
		}
	}
}

// A llama-server whose answers lose the per-token ids and log-probs (here a proxy deletes
// them; an older or differently built server): the run goes on, each round says what its
// tokens lack, the run warns once, and no round has an empty list posing as tokens.
func TestCaptureTokensLlamaWithoutIDs(t *testing.T) {
	s := env(t)
	srv := s.start(t, "toolcall.gguf", "-c", "4096", "--parallel", "1")
	strip := func(path string, answer []byte) []byte {
		var obj map[string]any
		if json.Unmarshal(answer, &obj) != nil {
			return answer
		}
		delete(obj, "completion_probabilities")
		if chs, ok := obj["choices"].([]any); ok {
			for _, ch := range chs {
				delete(ch.(map[string]any), "logprobs")
			}
		}
		out, _ := json.Marshal(obj)
		return out
	}
	proxy := newPathProxy(t, srv.base, strip)
	tasks, _ := counterTasks(t, 1)
	out, stderr := s.run(t, "--input", tasks, "--concurrency", "1", "--max-rounds", "2", "--capture-tokens",
		"--model-url", proxy.url, "--model", "toolcall", "--server", counterServer, "--seed", "5")
	if !strings.Contains(stderr, "--capture-tokens") || !strings.Contains(stderr, "without token ids") {
		t.Errorf("no warning:\n%s", stderr)
	}
	for _, r := range readJSONL[capturedRollout](t, filepath.Join(out, "trajectories.jsonl")) {
		if len(r.Trajectory.Rounds) != 2 {
			t.Fatalf("%d rounds, want 2", len(r.Trajectory.Rounds))
		}
		for i, rd := range r.Trajectory.Rounds {
			if rd.Gen != nil || rd.LP != nil || rd.Note == "" {
				t.Errorf("call %d: %d generation ids, %d log-probs, note %q", i, len(rd.Gen), len(rd.LP), rd.Note)
			}
		}
	}
}

// stripTokens1 is a chat request body without the token members rollout adds to its
// assistant messages (the server's template ignores them; the body is rendered as sent).
func stripTokens1(t *testing.T, body []byte) []byte {
	t.Helper()
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		t.Fatalf("chat request: %v", err)
	}
	obj["messages"] = stripTokens(obj["messages"])
	out, _ := json.Marshal(obj)
	return out
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
