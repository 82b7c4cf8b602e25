package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/verify"
)

// The cookie set on seed_session is carried on every tool call and on
// verify, so a stateful server scores the rollout.
func TestSessionCookiesCarried(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil,
		toolCalls(call{"a", "increment", `{}`}),
		toolCalls(call{"b", "increment", `{}`}),
		final("2"))
	task := parseTask(t, counterRow(""))
	sess := res.session(t, task)
	tr := m.config(nil).Run(context.Background(), task, sess, 1)
	if tr.Termination != agent.Completed {
		t.Fatalf("termination %q", tr.Termination)
	}
	body := task.AppendObject(nil, []string{"response"}, fieldRaw("response", `{}`))
	v, err := verify.Remote(context.Background(), sess, body, []string{"id", "responses_create_params", "expected_count"})
	if err != nil {
		t.Fatal(err)
	}
	if v.Reward != 1 || v.Components["count"] != 2 {
		t.Fatalf("reward %v components %v: the session's state was lost", v.Reward, v.Components)
	}
	if _, ok := v.Components["expected_count"]; ok {
		t.Fatalf("echoed row key counted as a component: %v", v.Components)
	}
	log := res.log()
	if len(log) != 4 || log[0].Path != "seed_session" || log[3].Path != "verify" {
		t.Fatalf("log %+v", log)
	}
	if log[0].Cookie != "" || log[0].Body != string(task.Raw) {
		t.Fatalf("seed_session: %+v", log[0])
	}
	for _, c := range log[1:] {
		if c.Cookie != "s1" {
			t.Errorf("%s carried cookie %q, want s1", c.Path, c.Cookie)
		}
	}
}

// Many concurrent sessions never share a jar: each sees only its own state.
func TestSessionsNeverShareCookies(t *testing.T) {
	res := newFakeResource(t, nil)
	srv := res.server(t)
	task := parseTask(t, counterRow(""))
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	held := make([]string, n) // the Cookie header each session would send after verify
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx := context.Background()
			sess := srv.NewSession()
			if h := sess.CookieHeader("verify"); h != "" {
				errs <- fmt.Errorf("session %d holds %q before seed_session", i, h)
			}
			defer func() { held[i] = sess.CookieHeader("verify") }()
			if err := sess.Seed(ctx, task.Raw); err != nil {
				errs <- err
				return
			}
			k := i%5 + 1
			for j := 0; j < k; j++ {
				if r := sess.CallTool(ctx, "increment", `{}`); r.Failed {
					errs <- fmt.Errorf("session %d: %s", i, r.Output)
					return
				}
			}
			r := sess.CallTool(ctx, "get_count", `{}`)
			if r.Output != fmt.Sprintf(`{"count":%d}`, k) {
				errs <- fmt.Errorf("session %d: count %s after %d increments", i, r.Output, k)
			}
			status, body, err := sess.PostVerify(ctx, []byte(fmt.Sprintf(`{"expected_count":%d}`, k)))
			if err != nil || status != 200 {
				errs <- fmt.Errorf("session %d: verify %d %v", i, status, err)
				return
			}
			var v struct {
				Reward float64 `json:"reward"`
			}
			json.Unmarshal(body, &v)
			if v.Reward != 1 {
				errs <- fmt.Errorf("session %d: reward %v: %s", i, v.Reward, body)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Every session got its own cookie on seed_session and carried only it.
	bySid := map[string]int{}
	for _, c := range res.log() {
		if c.Path == "seed_session" {
			if c.Cookie != "" {
				t.Fatalf("seed_session of a new session carried cookie %q", c.Cookie)
			}
			continue
		}
		if c.Cookie == "" {
			t.Fatalf("%s without a cookie", c.Path)
		}
		bySid[c.Cookie]++
	}
	if len(bySid) != n {
		t.Fatalf("%d distinct session cookies, want %d", len(bySid), n)
	}
	// Each session still holds its own cookie, and only it.
	seen := map[string]int{}
	for i, h := range held {
		sid, ok := strings.CutPrefix(h, "sid=")
		if !ok || bySid[sid] == 0 {
			t.Fatalf("session %d holds %q, not one cookie the server set", i, h)
		}
		if j, dup := seen[h]; dup {
			t.Fatalf("sessions %d and %d hold the same cookie %q", j, i, h)
		}
		seen[h] = i
	}
}

// Redirects are not followed: the request never leaves base/name.
func TestSessionRedirectsNotFollowed(t *testing.T) {
	res := newFakeResource(t, nil)
	res.handle("moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/increment", http.StatusTemporaryRedirect)
	})
	res.handle("seed_session", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	})
	sess := res.server(t).NewSession()
	var counter retry.Counter
	ctx := retry.WithCounter(context.Background(), &counter)

	r := sess.CallTool(ctx, "moved", `{}`)
	if !r.Failed || !strings.Contains(r.Output, "redirect") {
		t.Fatalf("redirected tool call: %+v", r)
	}
	if err := sess.Seed(ctx, []byte(`{}`)); err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("redirected seed_session: %v", err)
	}
	for _, c := range res.log() {
		if c.Path == "increment" || c.Path == "elsewhere" {
			t.Fatalf("a redirect was followed to %s", c.Path)
		}
	}
	if len(res.log()) != 2 || counter.Attempts() != 2 {
		t.Fatalf("log %+v attempts %d: a redirect was retried", res.log(), counter.Attempts())
	}
}

// An answer longer than MaxBodyBytes is cut, marked and failed.
func TestSessionBodyTruncated(t *testing.T) {
	res := newFakeResource(t, nil)
	big := strings.Repeat("x", 5000)
	res.handle("big", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) })
	res.handle("exact", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big[:1000]) })
	res.handle("verify", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"reward":1,"pad":"`+big+`"}`)
	})
	srv := res.server(t)
	srv.MaxBodyBytes = 1000
	sess := srv.NewSession()
	ctx := context.Background()

	r := sess.CallTool(ctx, "big", `{}`)
	if !r.Failed || r.Status != 200 || !strings.HasPrefix(r.Output, big[:1000]+"\n[truncated") ||
		strings.Count(r.Output, "x") != 1000 || !strings.Contains(r.Output, "1000 bytes") {
		t.Fatalf("truncated answer: failed %v status %d output %d bytes: %q", r.Failed, r.Status, len(r.Output), r.Output[len(r.Output)-80:])
	}
	r = sess.CallTool(ctx, "exact", `{}`)
	if r.Failed || r.Output != big[:1000] {
		t.Fatalf("an answer of exactly MaxBodyBytes was cut: %+v", r.Failed)
	}
	if _, _, err := sess.PostVerify(ctx, []byte(`{}`)); err == nil {
		t.Fatal("a truncated verify answer was accepted")
	}
}

// seed_session and verify are retried on 5xx; tool calls are not.
func TestSessionRetries(t *testing.T) {
	res := newFakeResource(t, nil)
	var mu sync.Mutex
	seeds := 0
	res.handle("seed_session", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seeds++
		n := seeds
		mu.Unlock()
		if n < 3 {
			http.Error(w, "warming up", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "{}")
	})
	sess := res.server(t).NewSession()
	var counter retry.Counter
	ctx := retry.WithCounter(context.Background(), &counter)
	if err := sess.Seed(ctx, []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	nSeeds := seeds
	mu.Unlock()
	if nSeeds != 3 || counter.Attempts() != 3 {
		t.Fatalf("seeds %d attempts %d, want 3", nSeeds, counter.Attempts())
	}
	for _, c := range res.log() {
		if c.Body != `{"a":1}` {
			t.Fatalf("a retried seed_session sent %q", c.Body)
		}
	}
	r := sess.CallTool(ctx, "fail", `{}`)
	if !r.Failed || r.Status != 500 || counter.Attempts() != 4 {
		t.Fatalf("tool call %+v attempts %d", r, counter.Attempts())
	}

	// A seed_session that keeps failing is an error with the status.
	res.handle("seed_session", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad row", http.StatusBadRequest)
	})
	err := sess.Seed(ctx, []byte(`{}`))
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "bad row") {
		t.Fatalf("seed error %v", err)
	}
}

// CallTimeout bounds one tool call; the call is then unreachable.
func TestSessionCallTimeout(t *testing.T) {
	res := newFakeResource(t, nil)
	res.handle("slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(20 * time.Second):
		}
	})
	srv := res.server(t)
	srv.CallTimeout = 50 * time.Millisecond
	r := srv.NewSession().CallTool(context.Background(), "slow", `{}`)
	if !r.Failed || !r.Unreachable || !strings.Contains(r.Output, "slow") {
		t.Fatalf("%+v", r)
	}
}
