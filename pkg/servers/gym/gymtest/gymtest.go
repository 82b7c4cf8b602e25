// Package gymtest holds test helpers for resource servers built with package gym: starting one
// on loopback, a rollout's client session (its own cookie jar), task rows and verify bodies,
// and NeMo Gym's recorded example rollouts (testdata/nemo-gym).
package gymtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/redistest"
	"github.com/rollout-dev/rollout/pkg/servers/gym"
	"github.com/rollout-dev/rollout/pkg/servers/store"
)

// Start starts the resource server b on loopback (an httptest server), closed with the test;
// opts as for gym.New.
func Start(t testing.TB, b gym.Builtin, opts gym.Options) (*gym.Server, *httptest.Server) {
	t.Helper()
	h, err := gym.New(context.Background(), b, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, srv
}

// Session is one rollout's client: its own cookie jar.
type Session struct {
	t      *testing.T
	base   string
	Client *http.Client
}

func NewSession(t *testing.T, srv *httptest.Server) *Session {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &Session{t: t, base: srv.URL, Client: &http.Client{Jar: jar}}
}

func (s *Session) Do(method, path string, body []byte) (int, []byte, http.Header) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.base+path, bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp.StatusCode, out, resp.Header
}

func (s *Session) Post(path string, body []byte) (int, []byte) {
	s.t.Helper()
	code, out, _ := s.Do(http.MethodPost, path, body)
	return code, out
}

// MustPost posts and wants a 200.
func (s *Session) MustPost(path string, body []byte) []byte {
	s.t.Helper()
	code, out := s.Post(path, body)
	if code != http.StatusOK {
		s.t.Fatalf("POST %s %s: %d %s", path, body, code, out)
	}
	return out
}

func (s *Session) Verify(row []byte, response json.RawMessage) map[string]any {
	s.t.Helper()
	return Decode(s.t, s.MustPost("/verify", WithResponse(s.t, row, response)))
}

func Decode(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return m
}

func ReadJSONL(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
			rows = append(rows, append([]byte(nil), line...))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// DataPath is the path of file of a NeMo Gym example server's data in the repository's
// testdata/nemo-gym (copies of NeMo Gym's own files; see testdata/nemo-gym/SOURCE.md).
func DataPath(server, file string) string {
	_, here, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(here), "..", "..", "..", "..", "testdata", "nemo-gym", server, file)
}

// UserText is the content of the last user message of a row's responses_create_params.input.
func UserText(t *testing.T, row []byte) string {
	t.Helper()
	var r struct {
		Params struct {
			Input json.RawMessage `json:"input"`
		} `json:"responses_create_params"`
	}
	if err := json.Unmarshal(row, &r); err != nil {
		t.Fatal(err)
	}
	var s string
	if json.Unmarshal(r.Params.Input, &s) == nil {
		return s
	}
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(r.Params.Input, &msgs); err != nil {
		t.Fatal(err)
	}
	text := ""
	for _, m := range msgs {
		if m.Role != "user" {
			continue
		}
		if json.Unmarshal(m.Content, &s) == nil {
			text = s
			continue
		}
		var parts []struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(m.Content, &parts)
		text = ""
		for _, p := range parts {
			text += p.Text
		}
	}
	return text
}

func FindTaskRow(t *testing.T, rows [][]byte, text string) []byte {
	t.Helper()
	var found []byte
	for _, row := range rows {
		if UserText(t, row) == text {
			if found != nil {
				t.Fatalf("two task rows match %q", text)
			}
			found = row
		}
	}
	if found == nil {
		t.Fatalf("no task row matches %q", text)
	}
	return found
}

// WithResponse is the verify body: the task row plus "response".
func WithResponse(t *testing.T, row []byte, response json.RawMessage) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(row, &m); err != nil {
		t.Fatal(err)
	}
	m["response"] = response
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// SetField returns row with key set to value (or removed when value is nil).
func SetField(t *testing.T, row []byte, key string, value any) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(row, &m); err != nil {
		t.Fatal(err)
	}
	if value == nil {
		delete(m, key)
	} else {
		raw, err := json.Marshal(value)
		if err != nil {
			t.Fatal(err)
		}
		m[key] = raw
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type Item struct {
	Type      string `json:"type"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	CallID    string `json:"call_id"`
	Output    string `json:"output"`
}

func OutputItems(t *testing.T, response json.RawMessage) []Item {
	t.Helper()
	var r struct {
		Output []Item `json:"output"`
	}
	if err := json.Unmarshal(response, &r); err != nil {
		t.Fatal(err)
	}
	return r.Output
}

// MutateOutput rewrites response.output; items are generic maps.
func MutateOutput(t *testing.T, response json.RawMessage, f func([]map[string]any) []map[string]any) json.RawMessage {
	t.Helper()
	var r map[string]any
	dec := json.NewDecoder(bytes.NewReader(response))
	dec.UseNumber()
	if err := dec.Decode(&r); err != nil {
		t.Fatal(err)
	}
	var items []map[string]any
	for _, it := range r["output"].([]any) {
		items = append(items, it.(map[string]any))
	}
	items = f(items)
	out := make([]any, len(items))
	for i, it := range items {
		out[i] = it
	}
	r["output"] = out
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func WithoutKey(t *testing.T, obj json.RawMessage, key string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, key)
	out, _ := json.Marshal(m)
	return out
}

type Record struct {
	Raw      map[string]json.RawMessage
	Response json.RawMessage
	Task     []byte
}

func LoadRecords(t *testing.T, server string) []Record {
	t.Helper()
	tasks := ReadJSONL(t, DataPath(server, "example.jsonl"))
	var recs []Record
	for _, line := range ReadJSONL(t, DataPath(server, "example_rollouts.jsonl")) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, Record{Raw: m, Response: m["response"], Task: FindTaskRow(t, tasks, UserText(t, line))})
	}
	if len(recs) == 0 {
		t.Fatalf("%s: no rollout records", server)
	}
	return recs
}

// Replay runs one Record against srv with a fresh session: seed, every function call in order
// (with exact, each answer must equal the recorded tool output byte for byte), then verify.
func Replay(t *testing.T, srv *httptest.Server, task []byte, response json.RawMessage, exact bool) map[string]any {
	t.Helper()
	s := NewSession(t, srv)
	if out := s.MustPost("/seed_session", task); string(out) != "{}" {
		t.Fatalf("seed_session answered %s", out)
	}
	items := OutputItems(t, response)
	recorded := map[string]string{}
	for _, it := range items {
		if it.Type == "function_call_output" {
			recorded[it.CallID] = it.Output
		}
	}
	for _, it := range items {
		if it.Type != "function_call" {
			continue
		}
		out := s.MustPost("/"+it.Name, []byte(it.Arguments))
		if want, ok := recorded[it.CallID]; exact && ok && string(out) != want {
			t.Errorf("%s(%s) = %s, recorded %s", it.Name, it.Arguments, out, want)
		}
	}
	return s.Verify(task, response)
}

func WantFields(t *testing.T, got map[string]any, want map[string]any) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok || !reflect.DeepEqual(g, w) {
			t.Errorf("%s = %#v, want %#v", k, g, w)
		}
	}
}

// losingStore is a session store whose Redis restarts, empty, right after its armed-th read of
// a session's state: the store loses the state at that point of a request.
type losingStore struct {
	store.Store
	reads atomic.Int64 // reads left before the restart; 0 or less: disarmed
	lose  func()
}

func (s *losingStore) Get(ctx context.Context, id string) ([]byte, bool, error) {
	state, ok, err := s.Store.Get(ctx, id)
	if s.reads.Add(-1) == 0 {
		s.lose()
	}
	return state, ok, err
}

// RestartDuringVerify checks that a verify of a seeded session of the stateful server b is
// scored on the state it read, or answered 409 session_not_found: the state lost while the
// verify runs (a real redis-server restarted empty after the first or the second read of the
// session) never makes it score 0 with a 200. play seeds the session, plays a rollout that
// earns reward 1, and returns the verify body.
func RestartDuringVerify(t *testing.T, b gym.Builtin, play func(t *testing.T, s *Session) []byte) {
	t.Helper()
	redis := redistest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs, err := store.Open(ctx, redis.URL, store.Options{Prefix: b.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	ls := &losingStore{Store: rs}
	ls.lose = func() {
		if err := redis.Restart(); err != nil {
			t.Error(err)
		}
	}
	_, srv := Start(t, b, gym.Options{Store: ls})
	for _, after := range []int64{1, 2} {
		s := NewSession(t, srv)
		body := play(t, s)
		ls.reads.Store(after)
		code, out := s.Post("/verify", body)
		ls.reads.Store(0)
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("verify answered %d %s: %v", code, out, err)
		}
		switch {
		case code == http.StatusConflict && m["error"] == "session_not_found":
		case code == http.StatusOK && m["reward"] == 1.0:
		default:
			t.Errorf("state lost after read %d of the verify: %d, reward %v, reason %v, error %v; want reward 1 or 409 session_not_found",
				after, code, m["reward"], m["reason"], m["error"])
		}
		if after == 1 {
			// The restart did lose the state: the session's next verify is a 409.
			if code, out := s.Post("/verify", body); code != http.StatusConflict {
				t.Errorf("verify after the restart: %d %.200s, want 409", code, out)
			}
		}
	}
}
