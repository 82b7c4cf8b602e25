package agent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/testnet"
	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/toolclient"
)

// Hostile answers from the model endpoint and the resource server, through the real clients
// (go-openai over a retry.Doer, toolclient.Session) on loopback: each gives that rollout a clear,
// specific error and failure class, bounded memory and time.

// streamBody writes n bytes of filler after head, in 1 MiB writes, and counts what the
// connection took before the client went away.
func streamBody(w http.ResponseWriter, head string, n int, written *atomic.Int64) {
	chunk := strings.Repeat("x", 1<<20)
	k, _ := io.WriteString(w, head)
	written.Add(int64(k))
	for sent := 0; sent < n; sent += len(chunk) {
		k, err := io.WriteString(w, chunk)
		written.Add(int64(k))
		if err != nil {
			return
		}
	}
}

// hijack answers with raw bytes on the connection, then closes it.
func hijack(w http.ResponseWriter, raw string) { testnet.RawAnswer(w, raw) }

// A 100 MB model answer is not read into memory: the client stops at the 32 MiB cap
// (DefaultMaxModelAnswerBytes), the call is not retried, and the rollout ends as model_error
// with a message that names the cap.
func TestModelHugeAnswerCapped(t *testing.T) {
	var written atomic.Int64
	m := newFakeModel(t, nil, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		streamBody(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"`, 100<<20, &written)
	})
	tr, counter := runCounted(t, m.config(nil))
	if tr.Termination != agent.ModelError || tr.FailureClass != record.FailModelError {
		t.Fatalf("termination %q class %q (%s)", tr.Termination, tr.FailureClass, tr.Error)
	}
	if want := "model call in round 0: model answer larger than 32 MiB (HTTP 200)"; tr.Error != want {
		t.Fatalf("error %q, want %q", tr.Error, want)
	}
	if counter.Attempts() != 1 {
		t.Fatalf("%d attempts: a too-large answer was retried", counter.Attempts())
	}
	// What the server got to send: the cap plus what the sockets buffer, not 100 MB.
	if n := written.Load(); n > 64<<20 {
		t.Fatalf("the client took %d MB of the answer", n>>20)
	}
}

// A too-large 502 page is model_unavailable (its status), after the retries; the cap is
// configurable with WithMaxAnswerBytes, and a Doer that is not a retry.Doer is capped too.
func TestModelAnswerCapConfigurable(t *testing.T) {
	var written atomic.Int64
	m := newFakeModel(t, nil, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(502)
		streamBody(w, "<html>", 100<<20, &written)
	})
	doer := &retry.Doer{Client: &http.Client{}, Policy: fastPolicy}
	cfg := &agent.Config{Model: agent.NewOpenAIModel(m.srv.URL+"/v1", "", doer, agent.WithMaxAnswerBytes(1<<20)), ModelName: "m"}
	cfg.Validate()
	tr, counter := runCounted(t, cfg)
	if tr.Termination != agent.ModelError || tr.FailureClass != record.FailModelUnavailable ||
		tr.Error != "model call in round 0: model answer larger than 1 MiB (HTTP 502)" {
		t.Fatalf("termination %q class %q error %q", tr.Termination, tr.FailureClass, tr.Error)
	}
	if counter.Attempts() != fastPolicy.MaxAttempts || doer.MaxBodyBytes != 0 {
		t.Fatalf("attempts %d; the caller's Doer was changed: %d", counter.Attempts(), doer.MaxBodyBytes)
	}

	// A plain http.Client as the doer: the body is capped as go-openai reads it.
	big := strings.Repeat("y", 5000)
	m = newFakeModel(t, nil, status(200, `{"choices":[{"message":{"role":"assistant","content":"`+big+`"}}]}`))
	cfg = &agent.Config{Model: agent.NewOpenAIModel(m.srv.URL+"/v1", "", &http.Client{}, agent.WithMaxAnswerBytes(1000)), ModelName: "m"}
	cfg.Validate()
	tr, _ = runCounted(t, cfg)
	if tr.FailureClass != record.FailModelError || tr.Error != "model call in round 0: model answer larger than 1000 bytes (HTTP 200)" {
		t.Fatalf("plain client: class %q error %q", tr.FailureClass, tr.Error)
	}
}

// A 200 answer that is not JSON, or JSON but not a chat completion, is invalid_output /
// model_error, not retried, and the message shows the start of what came back.
func TestModelNotAChatCompletion(t *testing.T) {
	cases := []struct{ body, want string }{
		{"hello", `model call in round 0: the answer (HTTP 200) is not a chat completion (invalid character 'h' looking for beginning of value): hello`},
		{"<html><body>It works!</body></html>", `model call in round 0: the answer (HTTP 200) is not a chat completion (invalid character '<' looking for beginning of value): <html><body>It works!</body></html>`},
		{"", `model call in round 0: the answer (HTTP 200) is not a chat completion (EOF): empty body`},
		{`{"choices":[]}`, `model call in round 0: the answer has no choices`},
		{`{"choices":null}`, `model call in round 0: the answer has no choices`},
		{`{"id":"x"}`, `model call in round 0: the answer has no choices`},
		{`{"choices":"none"}`, `model call in round 0: the answer (HTTP 200) is not a chat completion (json: cannot unmarshal string into Go struct field ChatCompletionResponse.choices of type []openai.ChatCompletionChoice): {"choices":"none"}`},
	}
	for _, c := range cases {
		m := newFakeModel(t, nil, status(200, c.body, "Content-Type", "application/json"))
		tr, counter := runCounted(t, m.config(nil))
		if tr.Termination != agent.InvalidOutput || tr.FailureClass != record.FailModelError || counter.Attempts() != 1 {
			t.Errorf("%q: termination %q class %q attempts %d", c.body, tr.Termination, tr.FailureClass, counter.Attempts())
		}
		if tr.Error != c.want {
			t.Errorf("%q: error\n%s\nwant\n%s", c.body, tr.Error, c.want)
		}
	}
}

// A model endpoint that closes the connection mid-answer (Content-Length larger than what it
// sends) is retried, and the attempts are counted; one that always does so ends the rollout
// as model_unavailable, saying what broke.
func TestModelClosesMidAnswer(t *testing.T) {
	cut := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n" + completionJSON("ok", 1, 1)[:40]
	m := newFakeModel(t, nil, func(w http.ResponseWriter, r *http.Request) { hijack(w, cut) }, final("recovered"))
	tr, counter := runCounted(t, m.config(nil))
	if tr.Termination != agent.Completed || tr.FinalText != "recovered" || counter.Attempts() != 2 || m.calls() != 2 {
		t.Fatalf("termination %q final %q attempts %d (%s)", tr.Termination, tr.FinalText, counter.Attempts(), tr.Error)
	}

	m = newFakeModel(t, nil, func(w http.ResponseWriter, r *http.Request) { hijack(w, cut) })
	tr, counter = runCounted(t, m.config(nil))
	if tr.Termination != agent.ModelError || tr.FailureClass != record.FailModelUnavailable || counter.Attempts() != fastPolicy.MaxAttempts {
		t.Fatalf("termination %q class %q attempts %d", tr.Termination, tr.FailureClass, counter.Attempts())
	}
	if !strings.HasPrefix(tr.Error, "model call in round 0: reading the answer (HTTP 200): unexpected EOF") {
		t.Fatalf("error %q", tr.Error)
	}
}

// A tool the row does not offer is never sent; the model is told which tools there are.
func TestRunUnknownToolListsAvailable(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil, toolCalls(call{"c1", "rm_rf", `{"path":"/"}`}, call{"c2", "increment", `{}`}), final("ok"))
	task := parseTask(t, counterRow(""))
	tr := m.config(nil).Run(context.Background(), task, res.session(t, task), 1)
	if tr.Termination != agent.Completed {
		t.Fatalf("termination %q (%s)", tr.Termination, tr.Error)
	}
	if p := res.toolPaths(); !equalStrings(p, []string{"increment"}) {
		t.Fatalf("the server saw %v, want only increment", p)
	}
	want := `Error: unknown tool "rm_rf"; available: increment, get_count, fail, reject`
	if tc := tr.Rounds[0].ToolCalls[0]; !tc.Failed || tc.Output != want {
		t.Fatalf("tool call %+v, want output %q", tc, want)
	}

	// A row with no tools: the model hallucinates one anyway.
	res = newFakeResource(t, nil)
	m = newFakeModel(t, nil, toolCalls(call{"c1", "search", `{}`}), final("ok"))
	task = parseTask(t, `{"responses_create_params":{"input":"hi"}}`)
	tr = m.config(nil).Run(context.Background(), task, res.session(t, task), 1)
	if tc := tr.Rounds[0].ToolCalls[0]; tc.Output != `Error: unknown tool "search": no tools are offered in this conversation` || len(res.toolPaths()) != 0 {
		t.Fatalf("tool call %+v, server %v", tc, res.toolPaths())
	}
}

// A 100 MB tool answer is cut at the tool-result cap (1 MiB by default): the model gets the
// first 1 MiB and a "[truncated at N bytes ...]" marker, the call counts as failed and records
// that the size is not known (-1: no Content-Length), and the rollout goes on. The client stops
// reading at the cap.
func TestRunHugeToolAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("16 MB through the model")
	}
	var written atomic.Int64
	res := newFakeResource(t, nil)
	res.handle("big", func(w http.ResponseWriter, r *http.Request) { streamBody(w, `{"rows":"`, 100<<20, &written) })
	m := newFakeModel(t, nil, toolCalls(call{"c1", "big", `{}`}), final("too much"))
	task := parseTask(t, `{"responses_create_params":{"input":"hi","tools":[{"type":"function","name":"big"}]}}`)
	tr := m.config(nil).Run(context.Background(), task, res.session(t, task), 1)
	if tr.Termination != agent.Completed || len(tr.Rounds) != 2 {
		t.Fatalf("termination %q rounds %d (%s)", tr.Termination, len(tr.Rounds), tr.Error)
	}
	tc := tr.Rounds[0].ToolCalls[0]
	marker := fmt.Sprintf("\n[truncated at %d bytes: the answer of big was longer]", toolclient.DefaultMaxToolResultBytes)
	if !tc.Failed || tc.Status != 200 || len(tc.Output) != toolclient.DefaultMaxToolResultBytes+len(marker) || !strings.HasSuffix(tc.Output, marker) || tc.OriginalBytes != -1 {
		t.Fatalf("tool call: failed %v status %d output %d bytes ending %q", tc.Failed, tc.Status, len(tc.Output), tc.Output[max(0, len(tc.Output)-80):])
	}
	if n := written.Load(); n > 48<<20 {
		t.Fatalf("the client took %d MB of the tool answer", n>>20)
	}
	req := m.request(1)
	if last := req.Messages[len(req.Messages)-1]; last.Content == nil || !strings.HasSuffix(*last.Content, marker) {
		t.Fatal("the model did not get the truncated output")
	}
}

// A tool server that closes mid-answer: a failed call (not retried: tools may change state),
// with the status and what broke; an HTML 500 page is the tool output, marked failed.
func TestRunToolBrokenAnswers(t *testing.T) {
	res := newFakeResource(t, nil)
	res.handle("cut", func(w http.ResponseWriter, r *http.Request) {
		hijack(w, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{\"count\":")
	})
	page := "<html><head><title>500 Internal Server Error</title></head><body><h1>Internal Server Error</h1></body></html>"
	res.handle("html", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(500)
		io.WriteString(w, page)
	})
	m := newFakeModel(t, nil, toolCalls(call{"c1", "cut", `{}`}, call{"c2", "html", `{}`}), final("ok"))
	task := parseTask(t, `{"responses_create_params":{"input":"hi","tools":[{"type":"function","name":"cut"},{"type":"function","name":"html"}]}}`)
	tr := m.config(nil).Run(context.Background(), task, res.session(t, task), 1)
	if tr.Termination != agent.Completed {
		t.Fatalf("termination %q (%s)", tr.Termination, tr.Error)
	}
	cut, html := tr.Rounds[0].ToolCalls[0], tr.Rounds[0].ToolCalls[1]
	if !cut.Failed || cut.Unreachable || cut.Status != 200 ||
		!strings.HasPrefix(cut.Output, "Error: tool cut failed: reading the answer of cut (HTTP 200): unexpected EOF") {
		t.Fatalf("cut: %+v", cut)
	}
	if !html.Failed || html.Status != 500 || html.Output != page {
		t.Fatalf("html: %+v", html)
	}
	if p := res.toolPaths(); !equalStrings(p, []string{"cut", "html"}) {
		t.Fatalf("the server saw %v: a tool call was retried", p)
	}
}

// silentServer is a server that accepts connections and never answers.
func silentServer(t *testing.T) (string, func() int) { return testnet.Silent(t) }

// within fails the test if fn takes longer than d.
func within(t *testing.T, d time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("still running after %v", d)
	}
}

// A model endpoint that accepts the connection and never answers costs each attempt its
// AttemptTimeout (attempts are retried: a new connection may answer): failure class
// timeout, a message naming the model call and the timeout, attempts counted.
func TestModelSilentServerAttemptTimeout(t *testing.T) {
	url, accepted := silentServer(t)
	doer := &retry.Doer{Client: &http.Client{}, Policy: retry.Policy{MaxAttempts: 2, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond},
		AttemptTimeout: 100 * time.Millisecond}
	cfg := &agent.Config{Model: agent.NewOpenAIModel(url+"/v1", "", doer), ModelName: "m"}
	cfg.Validate()
	var tr *agent.Trajectory
	var counter *retry.Counter
	within(t, 10*time.Second, func() { tr, counter = runCounted(t, cfg) })
	if tr.Termination != agent.Timeout || tr.FailureClass != record.FailTimeout {
		t.Fatalf("termination %q class %q (%s)", tr.Termination, tr.FailureClass, tr.Error)
	}
	if !strings.HasPrefix(tr.Error, "model call in round 0: no answer within the attempt timeout of 100ms: Post ") {
		t.Fatalf("error %q", tr.Error)
	}
	if counter.Attempts() != 2 || accepted() != 2 {
		t.Fatalf("attempts %d connections %d", counter.Attempts(), accepted())
	}

	// Config.ModelTimeout bounds the whole call, retries included, and is named too.
	cfg = &agent.Config{Model: agent.NewOpenAIModel(url+"/v1", "", &retry.Doer{Client: &http.Client{}, Policy: fastPolicy}), ModelName: "m",
		ModelTimeout: 100 * time.Millisecond}
	cfg.Validate()
	within(t, 10*time.Second, func() { tr, counter = runCounted(t, cfg) })
	if tr.FailureClass != record.FailTimeout || counter.Attempts() != 1 ||
		!strings.HasPrefix(tr.Error, "model call in round 0: no answer within the model timeout of 100ms: ") {
		t.Fatalf("class %q attempts %d error %q", tr.FailureClass, counter.Attempts(), tr.Error)
	}
}

// A resource server that accepts and never answers: each attempt of seed_session costs the
// call timeout and is retried (the error names the call and the timeout, and errors.Is finds
// the deadline, which the runner classes timeout); a tool call costs its call timeout once
// and the model is told; tool calls that keep timing out end the rollout with failure class
// timeout after MaxFailedRounds rounds.
func TestResourceSilentServerCallTimeout(t *testing.T) {
	url, _ := silentServer(t)
	srv, err := toolclient.New("silent", url, http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	srv.Retry = fastPolicy
	srv.CallTimeout = 100 * time.Millisecond
	var counter retry.Counter
	ctx := retry.WithCounter(context.Background(), &counter)

	within(t, 10*time.Second, func() { err = srv.NewSession().Seed(ctx, []byte(`{}`)) })
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "seed_session: no answer within the attempt timeout of 100ms: ") {
		t.Fatalf("seed: %v", err)
	}
	if counter.Attempts() != fastPolicy.MaxAttempts {
		t.Fatalf("seed attempts %d, want %d", counter.Attempts(), fastPolicy.MaxAttempts)
	}

	var res toolclient.Result
	within(t, 10*time.Second, func() { res = srv.NewSession().CallTool(ctx, "get_count", `{}`) })
	if !res.Failed || !res.Unreachable || !res.TimedOut || !strings.HasPrefix(res.Output, "Error: tool get_count failed: no answer within the call timeout of 100ms: ") {
		t.Fatalf("tool: %+v", res)
	}

	m := newFakeModel(t, nil, toolCalls(call{"c1", "get_count", `{}`}))
	task := parseTask(t, counterRow(""))
	var tr *agent.Trajectory
	within(t, 10*time.Second, func() { tr = m.config(nil).Run(ctx, task, srv.NewSession(), 1) })
	if tr.Termination != agent.Timeout || tr.FailureClass != record.FailTimeout || len(tr.Rounds) != agent.DefaultMaxFailedRounds {
		t.Fatalf("termination %q class %q rounds %d (%s)", tr.Termination, tr.FailureClass, len(tr.Rounds), tr.Error)
	}
	if !strings.HasPrefix(tr.Error, "every tool call timed out in 2 consecutive rounds: Error: tool get_count failed: no answer within the call timeout of 100ms") {
		t.Fatalf("error %q", tr.Error)
	}
	if tc := tr.Rounds[0].ToolCalls[0]; !tc.TimedOut || !tc.Failed {
		t.Fatalf("tool call %+v", tc)
	}
}

// seed_session and verify attempts that hang are retried: the call timeout bounds each
// attempt, so a server that hangs once (a stuck connection, a GC pause) costs one timeout,
// not the rollout. Tool calls are not retried.
func TestSessionHangOnceIsRetried(t *testing.T) {
	res := newFakeResource(t, nil)
	var mu sync.Mutex
	hits := map[string]int{}
	hangFirst := func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		n := hits[r.URL.Path]
		mu.Unlock()
		if n == 1 {
			<-r.Context().Done()
			return
		}
		io.WriteString(w, `{"reward":1}`)
	}
	res.handle("seed_session", hangFirst)
	res.handle("verify", hangFirst)
	res.handle("slow", hangFirst)
	srv := res.server(t)
	srv.CallTimeout = 100 * time.Millisecond
	var counter retry.Counter
	ctx := retry.WithCounter(context.Background(), &counter)
	sess := srv.NewSession()
	if err := sess.Seed(ctx, []byte(`{}`)); err != nil {
		t.Fatalf("seed: %v", err)
	}
	if status, body, err := sess.PostVerify(ctx, []byte(`{}`)); err != nil || status != 200 || string(body) != `{"reward":1}` {
		t.Fatalf("verify: %d %s %v", status, body, err)
	}
	if r := sess.CallTool(ctx, "slow", `{}`); !r.Failed || !r.TimedOut {
		t.Fatalf("tool: %+v", r)
	}
	if counter.Attempts() != 5 {
		t.Fatalf("attempts %d, want 5 (seed 2, verify 2, tool 1)", counter.Attempts())
	}
}

// The retry budget of a rollout spans its calls: seed_session spends 2 retries of a budget
// of 3, so the model call that meets 429s gets one retry, then fails rate_limited, saying the
// budget was spent.
func TestRunRetryBudget(t *testing.T) {
	res := newFakeResource(t, nil)
	var mu sync.Mutex
	seeds := 0
	res.handle("seed_session", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seeds++
		n := seeds
		mu.Unlock()
		if n <= 2 {
			http.Error(w, "warming up", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "{}")
	})
	m := newFakeModel(t, nil, status(429, rateLimitBody))
	srv := res.server(t)
	srv.Retry = retry.Policy{MaxAttempts: 10, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}
	doer := &retry.Doer{Client: &http.Client{}, Policy: srv.Retry}
	var counter retry.Counter
	ctx := retry.WithBudget(retry.WithCounter(context.Background(), &counter), 3)
	task := parseTask(t, counterRow(""))
	sess := srv.NewSession()
	if err := sess.Seed(ctx, task.Raw); err != nil {
		t.Fatal(err)
	}
	tr := m.config(doer).Run(ctx, task, sess, 1)
	if tr.Termination != agent.ModelError || tr.FailureClass != record.FailRateLimited {
		t.Fatalf("termination %q class %q (%s)", tr.Termination, tr.FailureClass, tr.Error)
	}
	if !strings.HasPrefix(tr.Error, "model call in round 0: retry budget of this rollout spent (3 retries); last attempt: HTTP 429 rate_limit_error (code rate_limit_exceeded): Rate limit reached") {
		t.Fatalf("error %q", tr.Error)
	}
	if counter.Attempts() != 5 || m.calls() != 2 {
		t.Fatalf("attempts %d model calls %d, want 5 (3 seeds + 2 model calls) and 2", counter.Attempts(), m.calls())
	}
}
