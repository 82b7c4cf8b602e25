package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/toolclient"
)

// memOutput keeps results in memory.
type memOutput struct {
	mu  sync.Mutex
	res []*record.Result
}

func (m *memOutput) Write(r *record.Result) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.res = append(m.res, r)
	return nil
}
func (m *memOutput) Close() error { return nil }

// chatModel answers: call tool "note" with the user's text as long as the
// conversation has fewer than rounds tool results, then a final answer.
func chatModel(rounds int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		tools, user := 0, ""
		for _, m := range req.Messages {
			if m.Role == "tool" {
				tools++
			}
			if m.Role == "user" {
				user = m.Content
			}
		}
		msg := map[string]any{"role": "assistant", "content": "done"}
		finish := "stop"
		if tools < rounds {
			args, _ := json.Marshal(map[string]string{"text": user})
			msg = map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": fmt.Sprintf("c%d", tools), "type": "function",
				"function": map[string]any{"name": "note", "arguments": string(args)}}}}
			finish = "tool_calls"
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": "x", "object": "chat.completion", "model": "m",
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
			"usage":   map[string]int{"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})
	}
}

// sessionServer is a stateful resource server: seed_session stores the
// row's user text under a new session cookie; every tool call and verify
// must come with that cookie and the text of its own task, else it counts
// a leak. verify rewards 1 when the session saw the expected notes.
type sessionServer struct {
	mu       sync.Mutex
	sessions map[string]string // cookie -> the task text
	notes    map[string]int
	leaks    atomic.Int64
	seeds    atomic.Int64
}

func newSessionServer() *sessionServer {
	return &sessionServer{sessions: map[string]string{}, notes: map[string]int{}}
}

func (s *sessionServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	json.NewDecoder(r.Body).Decode(&body)
	c, _ := r.Cookie("sid")
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.URL.Path {
	case "/seed_session":
		n := s.seeds.Add(1)
		sid := fmt.Sprintf("s%d", n)
		if c != nil {
			s.leaks.Add(1) // a fresh rollout must come without a cookie
		}
		in := body["responses_create_params"].(map[string]any)["input"].(string)
		s.sessions[sid] = in
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: sid})
		fmt.Fprint(w, "{}")
	case "/note":
		if c == nil || s.sessions[c.Value] != body["text"] {
			s.leaks.Add(1)
			http.Error(w, `{"error":"wrong session"}`, 400)
			return
		}
		s.notes[c.Value]++
		fmt.Fprint(w, `{"ok":true}`)
	case "/verify":
		reward := 0.0
		if c != nil && s.notes[c.Value] == 2 {
			reward = 1
		}
		fmt.Fprintf(w, `{"reward": %g, "notes": %d}`, reward, s.notes[c.Value])
	}
}

func writeRows(t testing.TB, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id": %d, "responses_create_params": {"input": "task %d", "tools": [{"type": "function", "name": "note"}]}}`+"\n", i, i)
	}
	path := filepath.Join(t.TempDir(), "rows.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func options(t testing.TB, modelURL, serverURL string, rows string, concurrency int) Options {
	tr := NewTransport(concurrency)
	srv, err := toolclient.New("notes", serverURL, tr)
	if err != nil {
		t.Fatal(err)
	}
	doer := &retry.Doer{Client: &http.Client{Transport: tr}, Policy: retry.Policy{MaxAttempts: 1}}
	return Options{Input: rows, Concurrency: concurrency, Repeats: 2, Servers: Servers{Default: srv},
		Agent: agent.Config{Model: agent.NewOpenAIModel(modelURL+"/v1", "", doer), ModelName: "m"}}
}

// Concurrent rollouts never share a session: every tool call and verify
// carries the cookie its own seed_session set.
func TestConcurrentRolloutsNeverShareSessions(t *testing.T) {
	model := httptest.NewServer(chatModel(2))
	defer model.Close()
	ss := newSessionServer()
	server := httptest.NewServer(ss)
	defer server.Close()
	out := &memOutput{}
	rep, err := Run(context.Background(), options(t, model.URL, server.URL, writeRows(t, 100), 32), []Output{out})
	if err != nil {
		t.Fatal(err)
	}
	if ss.leaks.Load() != 0 {
		t.Errorf("%d requests came with another rollout's session", ss.leaks.Load())
	}
	if ss.seeds.Load() != 200 || len(out.res) != 200 || rep.Started != 200 {
		t.Fatalf("seeds %d, results %d, started %d; want 200", ss.seeds.Load(), len(out.res), rep.Started)
	}
	seen := map[[2]int64]bool{}
	for _, r := range out.res {
		rec := r.Record
		key := [2]int64{rec.TaskIndex, rec.RolloutIndex}
		if seen[key] {
			t.Errorf("duplicate record %v", key)
		}
		seen[key] = true
		if rec.Reward != 1 || rec.RewardComponents["notes"] != 2 || rec.Rounds != 3 || rec.ToolCalls != 2 {
			t.Errorf("rollout %v: reward %v components %v rounds %d", key, rec.Reward, rec.RewardComponents, rec.Rounds)
		}
		if rec.TaskID != fmt.Sprint(rec.TaskIndex) || rec.Seed != Seed(0, int(rec.TaskIndex), int(rec.RolloutIndex)) {
			t.Errorf("rollout %v: task id %q seed %d", key, rec.TaskID, rec.Seed)
		}
	}
	if rep.Summary.MeanReward != 1 || rep.Summary.Scored != 200 {
		t.Errorf("summary %+v", rep.Summary)
	}
}

func TestSeedIsPerKeyAndStable(t *testing.T) {
	seen := map[int64][2]int{}
	for task := range 300 {
		for k := range 8 {
			s := Seed(42, task, k)
			if s < 0 || s > 1<<31-1 {
				t.Fatalf("seed %d out of 31 bits", s)
			}
			if prev, dup := seen[s]; dup {
				t.Errorf("seed of (%d,%d) equals that of %v", task, k, prev)
			}
			seen[s] = [2]int{task, k}
		}
	}
	if Seed(42, 3, 1) != Seed(42, 3, 1) || Seed(42, 3, 1) == Seed(43, 3, 1) {
		t.Error("seed not a function of (base, task, repeat)")
	}
}

func TestServersRouting(t *testing.T) {
	a, _ := toolclient.New("a", "http://127.0.0.1:1", nil)
	b, _ := toolclient.New("b", "http://127.0.0.1:2", nil)
	def, _ := toolclient.New("default", "http://127.0.0.1:3", nil)
	named := Servers{ByName: map[string]*toolclient.Server{"a": a, "b": b}}
	withDefault := Servers{Default: def, ByName: named.ByName}
	ref := func(name string) *dataset.Task { return &dataset.Task{AgentRef: &dataset.AgentRef{Name: name}} }
	cases := []struct {
		s      Servers
		t      *dataset.Task
		want   *toolclient.Server
		agent  string
		errHas string
	}{
		{named, ref("b"), b, "b", ""},
		{named, ref("c"), nil, "", `no --server for agent_ref.name "c" (named servers: a, b)`},
		{named, &dataset.Task{}, nil, "", "no agent_ref.name and no default"},
		{withDefault, ref("c"), def, "c", ""},
		{withDefault, &dataset.Task{}, def, "default", ""},
	}
	for i, tc := range cases {
		got, name, err := tc.s.For(tc.t)
		if got != tc.want || name != tc.agent || (err == nil) != (tc.errHas == "") || (err != nil && !strings.Contains(err.Error(), tc.errHas)) {
			t.Errorf("case %d: got %v %q %v", i, got, name, err)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	base := func() Options {
		return Options{Input: "x", Servers: Servers{Default: &toolclient.Server{}}, Agent: agent.Config{Model: agent.NewOpenAIModel("http://x", "", http.DefaultClient), ModelName: "m"}}
	}
	o := base()
	if err := o.Validate(); err != nil || o.Concurrency != DefaultConcurrency || o.Repeats != 1 || o.Arm != DefaultArm || o.Agent.MaxRounds != agent.DefaultMaxRounds {
		t.Errorf("defaults: %v %+v", err, o)
	}
	for _, bad := range []func(*Options){
		func(o *Options) { o.Input = "" },
		func(o *Options) { o.Concurrency = -1 },
		func(o *Options) { o.Repeats = -2 },
		func(o *Options) { o.Limit = -1 },
		func(o *Options) { o.Servers = Servers{} },
		func(o *Options) { o.Agent.ModelName = "" },
		func(o *Options) { o.Agent.MaxRounds = -1 },
	} {
		o := base()
		bad(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("accepted %+v", o)
		}
	}
}

// BenchmarkRunRollouts measures the runner end to end over loopback HTTP:
// 3-round rollouts against a zero-latency model and a stateful server.
func BenchmarkRunRollouts(b *testing.B) {
	model := httptest.NewServer(chatModel(2))
	defer model.Close()
	server := httptest.NewServer(newSessionServer())
	defer server.Close()
	rows := writeRows(b, b.N)
	o := options(b, model.URL, server.URL, rows, 64)
	o.Repeats = 1
	b.ResetTimer()
	rep, err := Run(context.Background(), o, []Output{&memOutput{}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(rep.Summary.Rollouts)/b.Elapsed().Seconds(), "rollouts/s")
	b.ReportMetric(float64(rep.Summary.Rollouts*3)/b.Elapsed().Seconds(), "model_calls/s")
}

func TestTaskFields(t *testing.T) {
	long := strings.Repeat("x", 200)
	row := `{"id": 7, "category": "lookup", "difficulty": "hard", "n": 3, "ok": true, "none": null, "list": [1], "obj": {"a": 1}, ` +
		`"long": "` + long + `", "responses_create_params": {"input": "hi"}, "agent_ref": {"type": "a", "name": "b"}}`
	r, err := dataset.NewReader(strings.NewReader(row+"\n"), "t.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	task, err := r.Next()
	if err != nil || task.Err != nil {
		t.Fatal(err, task.Err)
	}
	got := taskFields(task)
	want := map[string]string{"category": "lookup", "difficulty": "hard", "n": "3", "ok": "true"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("taskFields = %v, want %v", got, want)
	}
}

// countWindow is a Window of n that records the most rollouts it held at once.
type countWindow struct {
	sem        chan struct{}
	held, peak atomic.Int64
}

func (w *countWindow) Acquire(ctx context.Context) error {
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	n := w.held.Add(1)
	for p := w.peak.Load(); n > p && !w.peak.CompareAndSwap(p, n); p = w.peak.Load() {
	}
	return nil
}

func (w *countWindow) Release() { w.held.Add(-1); <-w.sem }

// A Window bounds the rollouts in flight below Concurrency; every rollout still runs.
func TestWindowBoundsRollouts(t *testing.T) {
	model := httptest.NewServer(chatModel(2))
	defer model.Close()
	ss := newSessionServer()
	server := httptest.NewServer(ss)
	defer server.Close()
	w := &countWindow{sem: make(chan struct{}, 3)}
	opts := options(t, model.URL, server.URL, writeRows(t, 40), 32)
	opts.Window = w
	out := &memOutput{}
	rep, err := Run(context.Background(), opts, []Output{out})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.res) != 80 || rep.Started != 80 {
		t.Fatalf("%d results, %d started; want 80", len(out.res), rep.Started)
	}
	if p := w.peak.Load(); p > 3 || p < 1 {
		t.Errorf("%d rollouts held the window of 3 at once", p)
	}
	if w.held.Load() != 0 {
		t.Errorf("%d rollouts still hold the window after the run", w.held.Load())
	}
}
