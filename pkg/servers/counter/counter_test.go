package counter

import (
	"github.com/rollout-dev/rollout/pkg/servers/gym"
	"github.com/rollout-dev/rollout/pkg/servers/gym/gymtest"

	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/pkg/servers/store"
)

// ---- helpers for the "counter" server (shared with store_test.go) ----

// counterClient is one rollout's client of a counter server: its own cookie jar. Its methods
// return errors instead of failing the test, so that goroutines can use it.
type counterClient struct {
	base string
	c    *http.Client
}

func newCounterClient(t testing.TB, base string, transport http.RoundTripper) *counterClient {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &counterClient{base: base, c: &http.Client{Jar: jar, Transport: transport, Timeout: 30 * time.Second}}
}

// post sends body to path and returns the status and the raw answer.
func (c *counterClient) post(path, body string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// want posts and wants status; it returns the answer decoded.
func (c *counterClient) want(status int, path, body string) (map[string]any, error) {
	code, out, err := c.post(path, body)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %v", path, err)
	}
	if code != status {
		return nil, fmt.Errorf("POST %s %s = %d %s, want %d", path, body, code, out, status)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		return nil, fmt.Errorf("POST %s: answer %s: %v", path, out, err)
	}
	return m, nil
}

// cookie is the client's session cookie for the server.
func (c *counterClient) cookie(name string) string {
	u, _ := url.Parse(c.base)
	for _, ck := range c.c.Jar.Cookies(u) {
		if ck.Name == name {
			return ck.Value
		}
	}
	return ""
}

// counterRow is a task row for the counter server.
func counterRow(initial, expected int) string {
	return fmt.Sprintf(`{"responses_create_params":{"input":"count"},"initial_count":%d,"expected_count":%d}`, initial, expected)
}

// counterVerify is the verify body for a row: the row plus a minimal valid response.
func counterVerify(row string) string {
	const response = `{"id":"resp_1","created_at":0,"model":"m","object":"response","parallel_tool_calls":false,"tool_choice":"auto","tools":[],"output":[]}`
	return strings.TrimSuffix(row, "}") + `,"response":` + response + `}`
}

// seedAndCount seeds the session with initial, calls increment_counter by each step, checks
// every answer, and returns the final count.
func (c *counterClient) seedAndCount(initial int, steps []int) (int, error) {
	if _, err := c.want(http.StatusOK, "/seed_session", counterRow(initial, 0)); err != nil {
		return 0, err
	}
	n := initial
	for _, s := range steps {
		m, err := c.want(http.StatusOK, "/increment_counter", fmt.Sprintf(`{"count":%d}`, s))
		if err != nil {
			return 0, err
		}
		n += s
		if m["success"] != true || m["count"] != float64(n) {
			return 0, fmt.Errorf("increment_counter %d answered %v, want count %d", s, m, n)
		}
	}
	return n, nil
}

// mustWant is want that fails the test on an error.
func (c *counterClient) mustWant(t *testing.T, status int, path, body string) map[string]any {
	t.Helper()
	m, err := c.want(status, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

const counterCookie = "CounterResourcesServer___counter"

// wantNotFound checks a 409 session_not_found answer to a tool call.
func wantNotFound(t *testing.T, c *counterClient, path, body string) {
	t.Helper()
	code, out, err := c.post(path, body)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if code != http.StatusConflict || json.Unmarshal(out, &m) != nil || m["error"] != "session_not_found" ||
		!strings.Contains(fmt.Sprint(m["message"]), "seed_session first") {
		t.Errorf("POST %s %s = %d %s, want 409 session_not_found", path, body, code, out)
	}
}

// wantVerify verifies row and wants the given fields (and, with reason "", no reason field).
func wantVerify(t *testing.T, c *counterClient, row string, want map[string]any) map[string]any {
	t.Helper()
	got := c.mustWant(t, http.StatusOK, "/verify", counterVerify(row))
	gymtest.WantFields(t, got, want)
	if _, has := want["reason"]; !has {
		if r, ok := got["reason"]; ok {
			t.Errorf("reason = %v, want none", r)
		}
	}
	return got
}

// ---- tests ----

func TestStateCounterHappyPath(t *testing.T) {
	_, srv := gymtest.Start(t, Builtin, gym.Options{})
	c := newCounterClient(t, srv.URL, nil)

	if code, out, _ := c.post("/seed_session", counterRow(5, 8)); code != http.StatusOK || string(out) != "{}" {
		t.Fatalf("seed_session = %d %s", code, out)
	}
	// Tool answers are written as the model sees them (Python's json.dumps).
	for _, step := range []struct{ path, body, want string }{
		{"/increment_counter", `{"count":3}`, `{"success": true, "count": 8}`},
		{"/decrement_counter", `{"count":2}`, `{"success": true, "count": 6}`},
		{"/increment_counter", `{"count":"2"}`, `{"success": true, "count": 8}`}, // pydantic lax int
		{"/get_counter_value", `{}`, `{"count": 8}`},
	} {
		code, out, err := c.post(step.path, step.body)
		if err != nil || code != http.StatusOK || string(out) != step.want {
			t.Errorf("POST %s %s = %d %s %v, want %s", step.path, step.body, code, out, err, step.want)
		}
	}

	got := wantVerify(t, c, counterRow(5, 8), map[string]any{
		"reward": 1.0, "count_correct": 1.0, "tool_calls": 4.0, "count": 8.0,
		// the request is echoed
		"initial_count": 5.0, "expected_count": 8.0, "responses_create_params": map[string]any{"input": "count"},
	})
	if _, ok := got["response"]; !ok {
		t.Error("response not echoed")
	}
	// reward is written as Python writes a float.
	if code, out, _ := c.post("/verify", counterVerify(counterRow(5, 8))); code != http.StatusOK || !bytes.Contains(out, []byte(`"reward":1.0,`)) {
		t.Errorf("verify = %d %s", code, out)
	}

	// A wrong expectation: reward 0, with the reason and both counts.
	wantVerify(t, c, counterRow(5, 9), map[string]any{
		"reward": 0.0, "count_correct": 0.0, "tool_calls": 4.0, "count": 8.0, "expected_count": 9.0, "reason": "count_mismatch",
	})

	// reset_counter sets 0; verify does not count as a tool call.
	if code, out, _ := c.post("/reset_counter", ``); code != http.StatusOK || string(out) != `{"success": true, "count": 0}` {
		t.Errorf("reset_counter = %d %s", code, out)
	}
	wantVerify(t, c, counterRow(5, 0), map[string]any{"reward": 1.0, "tool_calls": 5.0, "count": 0.0})

	// Seeding again resets the session: count and calls.
	c.mustWant(t, http.StatusOK, "/seed_session", counterRow(100, 0))
	wantVerify(t, c, counterRow(100, 100), map[string]any{"reward": 1.0, "tool_calls": 0.0, "count": 100.0})

	// initial_count absent or null is 0; big and negative counts are exact.
	c.mustWant(t, http.StatusOK, "/seed_session", `{"responses_create_params":{"input":"x"}}`)
	wantVerify(t, c, counterRow(0, 0), map[string]any{"reward": 1.0})
	c.mustWant(t, http.StatusOK, "/seed_session", `{"initial_count":null}`)
	c.mustWant(t, http.StatusOK, "/decrement_counter", `{"count":12345678901234567890123}`)
	c.mustWant(t, http.StatusOK, "/increment_counter", `{"count":1}`)
	code, out, _ := c.post("/get_counter_value", ``)
	if code != http.StatusOK || string(out) != `{"count": -12345678901234567890122}` {
		t.Errorf("get_counter_value = %d %s", code, out)
	}
}

func TestStateCounterHistoryIsBounded(t *testing.T) {
	mem := store.NewMemory(store.Options{})
	defer mem.Close()
	_, srv := gymtest.Start(t, Builtin, gym.Options{Store: mem})
	c := newCounterClient(t, srv.URL, nil)
	if _, err := c.seedAndCount(0, make([]int, 0)); err != nil {
		t.Fatal(err)
	}
	const calls = stateCounterHistory + 8
	for i := 1; i <= calls; i++ {
		c.mustWant(t, http.StatusOK, "/increment_counter", `{"count":1}`)
	}
	sid, _, _ := strings.Cut(c.cookie(counterCookie), ".")
	data, ok, err := mem.Get(context.Background(), sid)
	if err != nil || !ok {
		t.Fatalf("state: %v %v", ok, err)
	}
	st, err := decodeCounterState(data)
	if err != nil {
		t.Fatal(err)
	}
	if st.Calls != calls || st.Count.Int64() != calls || len(st.History) != stateCounterHistory {
		t.Fatalf("state = calls %d, count %v, %d history entries; want %d, %d, %d", st.Calls, st.Count, len(st.History), calls, calls, stateCounterHistory)
	}
	// The newest calls are kept.
	if last := st.History[len(st.History)-1]; last.Tool != "increment_counter" || last.Count.Int64() != calls || last.By.Int64() != 1 {
		t.Errorf("last history entry = %+v", last)
	}
	if first := st.History[0]; first.Count.Int64() != calls-stateCounterHistory+1 {
		t.Errorf("first history entry = %+v", first)
	}
}

func TestStateCounterSessionIsolation(t *testing.T) {
	_, srv := gymtest.Start(t, Builtin, gym.Options{})
	transport := &http.Transport{MaxIdleConnsPerHost: 64}
	defer transport.CloseIdleConnections()

	const sessions = 200
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range sessions {
		c := newCounterClient(t, srv.URL, transport)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			steps := []int{i % 7, 1, i % 3}
			n, err := c.seedAndCount(i*10, steps)
			if err != nil {
				t.Errorf("session %d: %v", i, err)
				return
			}
			m, err := c.want(http.StatusOK, "/verify", counterVerify(counterRow(i*10, n)))
			if err != nil {
				t.Errorf("session %d: %v", i, err)
				return
			}
			if m["reward"] != 1.0 || m["count"] != float64(n) || m["tool_calls"] != float64(len(steps)) {
				t.Errorf("session %d: verify %v, want reward 1, count %d, %d calls", i, m, n, len(steps))
			}
			// Another session's expectation fails.
			m, err = c.want(http.StatusOK, "/verify", counterVerify(counterRow(0, n+1)))
			if err != nil || m["reward"] != 0.0 {
				t.Errorf("session %d: verify against a wrong count = %v %v", i, m, err)
			}
		})
	}
	wg.Wait()
}

func TestStateCounterMissingState(t *testing.T) {
	mem := store.NewMemory(store.Options{})
	defer mem.Close()
	_, srv := gymtest.Start(t, Builtin, gym.Options{Store: mem})
	c := newCounterClient(t, srv.URL, nil)

	// Never seeded: every tool says why, and none creates state.
	for _, call := range [][2]string{
		{"/increment_counter", `{"count":1}`},
		{"/decrement_counter", `{"count":1}`},
		{"/get_counter_value", `{}`},
		{"/reset_counter", `{}`},
	} {
		wantNotFound(t, c, call[0], call[1])
	}
	if n := mem.Len(); n != 0 {
		t.Errorf("tool calls on a missing session created %d sessions", n)
	}
	wantVerify(t, c, counterRow(0, 0), map[string]any{
		"reward": 0.0, "count_correct": 0.0, "tool_calls": 0.0, "reason": "session_not_found",
	})
	if _, has := c.mustWant(t, http.StatusOK, "/verify", counterVerify(counterRow(0, 0)))["count"]; has {
		t.Error("verify of a missing session reports a count")
	}
	// Bad arguments are still a 422 before the session is looked at.
	if code, out, _ := c.post("/increment_counter", `{}`); code != http.StatusUnprocessableEntity {
		t.Errorf("increment_counter {} = %d %s", code, out)
	}
	// Once seeded, the same session works.
	n, err := c.seedAndCount(2, []int{3})
	if err != nil || n != 5 {
		t.Fatal(n, err)
	}
	wantVerify(t, c, counterRow(2, 5), map[string]any{"reward": 1.0, "tool_calls": 1.0})

	// Corrupt state is a 500, not a crash or a silent reset.
	sid, _, _ := strings.Cut(c.cookie(counterCookie), ".")
	_ = mem.Update(context.Background(), sid, func([]byte, bool) ([]byte, error) { return []byte("garbage"), nil })
	if code, out, _ := c.post("/get_counter_value", `{}`); code != http.StatusInternalServerError {
		t.Errorf("get_counter_value on corrupt state = %d %s", code, out)
	}
	if code, out, _ := c.post("/verify", counterVerify(counterRow(0, 5))); code != http.StatusInternalServerError {
		t.Errorf("verify on corrupt state = %d %s", code, out)
	}
}

func TestStateCounterLostCookie(t *testing.T) {
	_, srv := gymtest.Start(t, Builtin, gym.Options{})
	a := newCounterClient(t, srv.URL, nil)
	if _, err := a.seedAndCount(5, []int{3}); err != nil {
		t.Fatal(err)
	}
	// The same rollout, cookie lost: a new session, which has no counter.
	b := newCounterClient(t, srv.URL, nil)
	wantNotFound(t, b, "/increment_counter", `{"count":1}`)
	wantVerify(t, b, counterRow(5, 8), map[string]any{"reward": 0.0, "reason": "session_not_found"})
	// A tampered cookie is a lost cookie.
	sid, _, _ := strings.Cut(a.cookie(counterCookie), ".")
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/get_counter_value", strings.NewReader(`{}`))
	req.AddCookie(&http.Cookie{Name: counterCookie, Value: sid + ".forged"})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("forged cookie: %d, want 409", resp.StatusCode)
	}
	// The original session is untouched.
	wantVerify(t, a, counterRow(5, 8), map[string]any{"reward": 1.0, "tool_calls": 1.0})
}

func TestStateCounterBadArguments(t *testing.T) {
	_, srv := gymtest.Start(t, Builtin, gym.Options{})
	c := newCounterClient(t, srv.URL, nil)
	if _, err := c.seedAndCount(1, []int{1}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/increment_counter", "/decrement_counter"} {
		for body, loc := range map[string]string{
			`{}`:               `"loc":["body","count"]`,
			`{"by":1}`:         `"loc":["body","count"]`,
			`{"count":"many"}`: `"loc":["body","count"]`,
			`{"count":1.5}`:    `"loc":["body","count"]`,
			`{"count":null}`:   `"loc":["body","count"]`,
			`{"count":[1]}`:    `"loc":["body","count"]`,
			`not json`:         `"type":"json_invalid"`,
			``:                 `"loc":["body"]`,
			`[1]`:              `"type":"model_attributes_type"`,
		} {
			code, out, err := c.post(path, body)
			if err != nil || code != http.StatusUnprocessableEntity || !strings.HasPrefix(string(out), `{"detail":[{`) || !strings.Contains(string(out), loc) {
				t.Errorf("%s %s = %d %s, want 422 mentioning %s", path, body, code, out, loc)
			}
		}
	}
	// Nothing changed: count 2 after one call.
	wantVerify(t, c, counterRow(1, 2), map[string]any{"reward": 1.0, "tool_calls": 1.0})

	for body, loc := range map[string]string{
		`{"initial_count":"x"}`: `"loc":["body","initial_count"]`,
		`{"initial_count":1.5}`: `"loc":["body","initial_count"]`,
		`"row"`:                 `"type":"model_attributes_type"`,
	} {
		if code, out, _ := c.post("/seed_session", body); code != http.StatusUnprocessableEntity || !strings.Contains(string(out), loc) {
			t.Errorf("seed_session %s = %d %s", body, code, out)
		}
	}
	// A rejected seed leaves the session as it was.
	wantVerify(t, c, counterRow(1, 2), map[string]any{"reward": 1.0})

	for body, loc := range map[string]string{
		counterVerify(`{"responses_create_params":{"input":"x"}}`):                        `"loc":["body","expected_count"]`,
		counterVerify(`{"responses_create_params":{"input":"x"},"expected_count":"two"}`): `"loc":["body","expected_count"]`,
		`{"expected_count":2}`: `"loc":["body","response"]`,
	} {
		if code, out, _ := c.post("/verify", body); code != http.StatusUnprocessableEntity || !strings.Contains(string(out), loc) {
			t.Errorf("verify %s = %d %s, want 422 mentioning %s", body, code, out, loc)
		}
	}
	if code, out, _ := c.post("/no_such_tool", `{}`); code != http.StatusNotFound {
		t.Errorf("unknown tool = %d %s", code, out)
	}
}

func TestStateCounterEndSession(t *testing.T) {
	mem := store.NewMemory(store.Options{})
	defer mem.Close()
	_, srv := gymtest.Start(t, Builtin, gym.Options{Store: mem})
	c, other := newCounterClient(t, srv.URL, nil), newCounterClient(t, srv.URL, nil)
	if _, err := c.seedAndCount(5, []int{3}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.seedAndCount(1, nil); err != nil {
		t.Fatal(err)
	}
	wantVerify(t, c, counterRow(5, 8), map[string]any{"reward": 1.0})
	if code, out, _ := c.post("/end_session", ``); code != http.StatusOK || string(out) != "{}" {
		t.Fatalf("end_session = %d %s", code, out)
	}
	if n := mem.Len(); n != 1 {
		t.Errorf("%d sessions after end_session, want 1 (the other)", n)
	}
	wantVerify(t, c, counterRow(5, 8), map[string]any{"reward": 0.0, "reason": "session_not_found"})
	wantNotFound(t, c, "/get_counter_value", `{}`)
	// Ending a session twice is harmless; the other session is untouched.
	c.mustWant(t, http.StatusOK, "/end_session", ``)
	wantVerify(t, other, counterRow(1, 1), map[string]any{"reward": 1.0})
}

func TestStateCounterTTL(t *testing.T) {
	const ttl = 300 * time.Millisecond
	_, srv := gymtest.Start(t, Builtin, gym.Options{TTL: ttl})
	c := newCounterClient(t, srv.URL, nil)
	start := time.Now()
	if _, err := c.seedAndCount(5, []int{3}); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < ttl/2 {
		wantVerify(t, c, counterRow(5, 8), map[string]any{"reward": 1.0})
	}
	waitForSessionLost(t, c, counterRow(5, 8), 5*time.Second)
	if since := time.Since(start); since < ttl {
		t.Errorf("state gone after %v, before its TTL %v", since, ttl)
	}
	wantNotFound(t, c, "/increment_counter", `{"count":1}`)
}

// waitForSessionLost polls verify until the session's state is gone: a seeded session whose
// state the store lost is answered 409 session_not_found (never a reward), for at most limit.
func waitForSessionLost(t *testing.T, c *counterClient, row string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		code, out, err := c.post("/verify", counterVerify(row))
		if err != nil {
			t.Fatal(err)
		}
		if code == http.StatusConflict {
			if !strings.Contains(string(out), `"error":"session_not_found"`) {
				t.Errorf("verify = 409 %s, want session_not_found", out)
			}
			return
		}
		if code != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("verify = %d %s after %v, want 409 session_not_found", code, out, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
