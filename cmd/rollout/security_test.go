package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
	"github.com/rollout-dev/rollout/pkg/servers/store"
)

// ---- the API key is never written ----

// secretKey is a unique OPENAI_API_KEY marker for one test.
func secretKey(t *testing.T) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "sk-rollout-test-" + hex.EncodeToString(b)
}

// recorder is a resource server (a built-in one) behind a handler that keeps what it was sent:
// paths, headers and bodies.
type recorder struct {
	*httptest.Server
	mu       sync.Mutex
	paths    []string
	requests [][]byte // each request's header lines and body
}

func newRecorder(t *testing.T, name string) *recorder {
	t.Helper()
	b, err := newBuiltin(context.Background(), name, "memory", store.DefaultTTL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	rec := &recorder{}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var dump bytes.Buffer
		fmt.Fprintf(&dump, "%s %s\n", r.Method, r.URL.RequestURI())
		r.Header.Write(&dump)
		dump.Write(body)
		rec.mu.Lock()
		rec.paths = append(rec.paths, r.URL.Path)
		rec.requests = append(rec.requests, dump.Bytes())
		rec.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		b.ServeHTTP(w, r)
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (r *recorder) seen() (paths []string, requests [][]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.paths), slices.Clone(r.requests)
}

// keyModel is a model endpoint that records the Authorization headers it gets.
type keyModel struct {
	*httptest.Server
	mu    sync.Mutex
	auths []string
}

func newKeyModel(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, auth string)) *keyModel {
	m := &keyModel{}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		auth := r.Header.Get("Authorization")
		m.mu.Lock()
		m.auths = append(m.auths, auth)
		m.mu.Unlock()
		answer(w, r, auth)
	}))
	t.Cleanup(m.Close)
	return m
}

// leaks lists where key occurs: in any file under dirs or in files (the raw bytes, so also
// in Parquet's uncompressed parts), in the decoded records of any rollouts.parquet (its pages are
// compressed, so the raw bytes alone prove nothing), and in the named texts.
func leaks(t *testing.T, key string, dirs, files []string, texts map[string]string) []string {
	t.Helper()
	var where []string
	look := func(name string, b []byte) {
		if i := bytes.Index(b, []byte(key)); i >= 0 {
			lo, hi := max(0, i-120), min(len(b), i+len(key)+40)
			where = append(where, fmt.Sprintf("%s at byte %d: …%s…", name, i, bytes.ToValidUTF8(b[lo:hi], []byte("?"))))
		}
	}
	readFile := func(path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		look(path, b)
		if filepath.Ext(path) == ".parquet" {
			recs, err := record.ReadParquet(path)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			for _, r := range recs {
				j, _ := json.Marshal(r)
				look(fmt.Sprintf("%s (decoded) record (%d, %d)", path, r.TaskIndex, r.RolloutIndex), j)
			}
		}
	}
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type().IsRegular() {
				readFile(path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		readFile(f)
	}
	for name, s := range texts {
		look(name, []byte(s))
	}
	return where
}

// TestSecurityAPIKeyNeverWritten runs `rollout run` with OPENAI_API_KEY set to a unique marker
// against a hostile model endpoint that echoes the Authorization header back in its 401 error,
// one that echoes it in its answer, the simulator (builtin:sim), and a model that fails with
// 500s. The key must reach the model endpoint (so its absence elsewhere means something), and
// appear in no output file (the Parquet file, raw and decoded, trajectories, summary, journal,
// manifest, --jsonl-out), neither on stdout nor on stderr, and never reach the resource server.
//
// The hostile cases leak today (the echoed text becomes the record's error, or the model's
// answer): see RELIABILITY.md, "Security". Until the redaction lands in pkg/agent, they report
// every place the key was found and skip, unless ROLLOUT_SECURITY_STRICT=1; any other leak
// fails.
func TestSecurityAPIKeyNeverWritten(t *testing.T) {
	input := headLines(t, extractionData, 4)
	cases := []struct {
		name    string
		model   func(t *testing.T) (url string, auths func() []string)
		class   string // the failure class every record must have ("" for rewards)
		hostile bool   // the endpoint echoes the key: a known leak until the redaction lands
	}{
		{"hostile 401 echoing the key", func(t *testing.T) (string, func() []string) {
			m := newKeyModel(t, func(w http.ResponseWriter, r *http.Request, auth string) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				b, _ := json.Marshal(map[string]any{"error": map[string]any{
					"message": "Incorrect API key provided: " + auth + ". You sent Authorization: " + auth,
					"type":    "invalid_request_error", "param": nil, "code": "invalid_api_key"}})
				w.Write(b)
			})
			return m.URL + "/v1", m.authsSeen
		}, record.FailModelError, true},
		{"hostile 200 echoing the key in its answer", func(t *testing.T) (string, func() []string) {
			m := newKeyModel(t, func(w http.ResponseWriter, r *http.Request, auth string) {
				writeChat(w, "Here is what you sent me: "+auth)
			})
			return m.URL + "/v1", m.authsSeen
		}, "", true},
		{"hostile 200 echoing the key in every field of its answer", func(t *testing.T) (string, func() []string) {
			m := newKeyModel(t, func(w http.ResponseWriter, r *http.Request, auth string) {
				key := strings.TrimPrefix(auth, "Bearer ")
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Echo", key)
				b, _ := json.Marshal(map[string]any{"id": key, "object": key, "created": 1, "model": key, "system_fingerprint": key,
					"service_tier": key, "unknown_field": map[string]any{key: key},
					"choices": []any{map[string]any{"index": 0, "finish_reason": key,
						"message": map[string]any{"role": "assistant", "content": key, "reasoning_content": key, "refusal": key, "name": key,
							"tool_calls": []any{map[string]any{"id": key, "type": "function", "function": map[string]any{"name": key, "arguments": `{"k":"` + key + `"}`}}}}}},
					"usage": map[string]any{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2, key: key}})
				w.Write(b)
			})
			return m.URL + "/v1", m.authsSeen
		}, "", true},
		{"simulator", func(t *testing.T) (string, func() []string) {
			return "builtin:sim", nil
		}, "", false},
		{"500s", func(t *testing.T) (string, func() []string) {
			m := newKeyModel(t, func(w http.ResponseWriter, r *http.Request, auth string) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusInternalServerError)
				io.WriteString(w, `{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}`)
			})
			return m.URL + "/v1", m.authsSeen
		}, record.FailModelUnavailable, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := secretKey(t)
			url, auths := tc.model(t)
			res := newRecorder(t, "extraction")
			out := t.TempDir()
			jsonl := filepath.Join(t.TempDir(), "ng.jsonl")
			r := runCLI(t, context.Background(), map[string]string{"OPENAI_API_KEY": key},
				"run", "--input", input, "--out", out, "--jsonl-out", jsonl, "--model-url", url, "--model", "m",
				"--server", res.URL, "--retries", "1", "--progress-interval", "10ms", "--concurrency", "2", "--no-preflight")
			want := exitOK
			if tc.class != "" {
				want = exitFailures // every rollout failed
				if record.FailureClass(tc.class).Transient() {
					want = exitTransient // …every one transiently
				}
			}
			if r.code != want {
				t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
			}
			for _, rec := range readRecords(t, out) {
				if string(rec.FailureClass) != tc.class {
					t.Errorf("record %d: failure class %q (%s), want %q", rec.TaskIndex, rec.FailureClass, rec.Error, tc.class)
				}
			}
			if auths != nil {
				got := auths()
				if len(got) == 0 || got[0] != "Bearer "+key {
					t.Fatalf("the model endpoint got Authorization %q, want the key", got)
				}
			}
			files := []string{}
			if _, err := os.Stat(jsonl); err == nil {
				files = append(files, jsonl)
			}
			where := leaks(t, key, []string{out}, files, map[string]string{"stdout": r.stdout, "stderr": r.stderr})
			_, reqs := res.seen()
			if len(reqs) == 0 {
				t.Fatal("the resource server saw nothing")
			}
			for i, req := range reqs {
				if bytes.Contains(bytes.ToLower(req), []byte("authorization")) {
					t.Errorf("an Authorization header reached the resource server in request %d:\n%s", i, req)
				}
				if j := bytes.Index(req, []byte(key)); j >= 0 {
					where = append(where, fmt.Sprintf("resource server request %d (%s)", i, bytes.SplitN(req, []byte("\n"), 2)[0]))
				}
			}
			if len(where) == 0 {
				return
			}
			for _, w := range where {
				t.Errorf("the API key leaked: %s", w)
			}
		})
	}
}

func (m *keyModel) authsSeen() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.auths)
}

// ---- loopback by default ----

// startCommand runs `rollout ARGS…` in the background and returns the first line it prints
// on stdout (its URL) and a function that interrupts it (as Ctrl-C) and returns its exit code.
func startCommand(t *testing.T, args ...string) (string, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, args, env{stdin: strings.NewReader(""), stdout: pw, stderr: io.Discard, getenv: func(string) string { return "" }})
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	go io.Copy(io.Discard, pr)
	if err != nil {
		cancel()
		t.Fatalf("rollout %s printed no URL: %v (exit %d)", args[0], err, <-done)
	}
	stop := func() int {
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(10 * time.Second):
			t.Fatalf("rollout %s did not stop after Ctrl-C", args[0])
			return -1
		}
	}
	return strings.TrimSpace(line), stop
}

// `rollout serve` and `rollout sim` listen on 127.0.0.1 unless told otherwise, and so do the
// builtin: servers and the endpoints that `rollout run` starts in its own process.
func TestSecurityLoopbackByDefault(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "extraction"},
		{"serve", "counter", "--chaos-fail-rate", "0.5"},
		{"sim"},
		{"sim", "--tasks", headLines(t, extractionData, 2), "--hang", "0.1"},
	} {
		url, stop := startCommand(t, args...)
		if !strings.HasPrefix(url, "http://127.0.0.1:") {
			t.Errorf("rollout %s printed %q, want http://127.0.0.1:PORT", strings.Join(args, " "), url)
		}
		if code := stop(); code != 0 {
			t.Errorf("rollout %s: exit %d after Ctrl-C", strings.Join(args, " "), code)
		}
	}
	url, stop, err := startBuiltin(context.Background(), "counter", "memory", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("builtin: server on %q, want loopback", url)
	}
	url, stop2, err := serveLocal(http.NotFoundHandler(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("in-process endpoint (builtin:sim, replay:) on %q, want loopback", url)
	}
}

// ---- tool names never leave base/NAME ----

// A model that calls tools named like paths, URLs or protocol endpoints, even ones the row
// offers, gets an error for each; the resource server only ever sees seed_session, the one
// legitimate tool, verify, and the end_session that ends the rollout (the server, rollout's
// own, says it takes it), once, after verify. (The unit tests are pkg/agent's TestCallToolRefusesNames and
// TestRunRefusesPathAndURLToolNames; this is the whole CLI over HTTP.)
func TestSecurityToolNamesNeverReachTheServer(t *testing.T) {
	hostile := []string{"../verify", "..", "a/b", "a?b=1", "http://evil.example/x", "//evil.example/x", "verify", "seed_session", "end_session", "%2e%2e", `a\b`, "x#y"}
	var tools []string
	for _, n := range append([]string{"get_weather"}, hostile...) {
		b, _ := json.Marshal(n)
		tools = append(tools, `{"type": "function", "name": `+string(b)+`, "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}`)
	}
	row := `{"id": "t", "responses_create_params": {"input": [{"role": "user", "content": "weather?"}], "tools": [` + strings.Join(tools, ", ") + `]}}` + "\n"
	input := filepath.Join(t.TempDir(), "rows.jsonl")
	os.WriteFile(input, []byte(row), 0o644)

	var calls []map[string]any
	for i, n := range append(hostile, "get_weather") {
		calls = append(calls, map[string]any{"id": fmt.Sprintf("c%d", i), "type": "function",
			"function": map[string]any{"name": n, "arguments": `{"city":"SF"}`}})
	}
	m := newFakeModel(t, func(w http.ResponseWriter, req map[string]any, _ int64) {
		msgs := req["messages"].([]any)
		if msgs[len(msgs)-1].(map[string]any)["role"] == "tool" {
			writeChat(w, "sunny")
			return
		}
		writeChat(w, "", calls...)
	})
	res := newRecorder(t, "example_single_tool_call")
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--model-url", m.URL+"/v1", "--model", "m",
		"--server", res.URL, "--quiet")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	recs := readRecords(t, dir)
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	paths, _ := res.seen()
	for i, p := range paths {
		if p == "/end_session" && i == len(paths)-1 && i > 0 && paths[i-1] == "/verify" {
			continue // the protocol's, not the model's
		}
		if p != "/" && p != "/seed_session" && p != "/get_weather" && p != "/verify" { // "/": the preflight
			t.Errorf("the resource server saw %q (all: %v)", p, paths)
		}
	}
	if rec := recs[0]; rec.FailureClass == record.FailBadTask {
		// The row itself was refused for its tool names: nothing could reach the server.
		t.Logf("the row was refused: %s", rec.Error)
		return
	}
	if !slices.Contains(paths, "/get_weather") || recs[0].ToolCalls != int32(len(calls)) || recs[0].ToolErrors != int32(len(hostile)) {
		t.Errorf("paths %v; record: %d tool calls, %d errors (%s)", paths, recs[0].ToolCalls, recs[0].ToolErrors, recs[0].Error)
	}
}

// ---- the fault flags reach the simulator and the server ----

// --sim-connection-reset and --sim-hang reach the in-process simulator (every model call
// fails, each rollout is a typed failure), --chaos-* reach `rollout serve`, and bad values are
// usage errors.
func TestSimChaosFlags(t *testing.T) {
	input := headLines(t, extractionData, 2)
	for _, tc := range []struct {
		flags []string
		class string
	}{
		{[]string{"--sim-connection-reset", "1"}, record.FailModelUnavailable},
		{[]string{"--sim-hang", "1", "--model-timeout", "100ms"}, ""}, // a timeout class, named by pkg/agent
	} {
		dir := t.TempDir()
		args := append([]string{"run", "--input", input, "--out", dir, "--model-url", "builtin:sim", "--server", "builtin:extraction",
			"--retries", "1", "--quiet"}, tc.flags...)
		r := runCLI(t, context.Background(), nil, args...)
		if r.code != exitTransient { // every rollout failed, model_unavailable or timeout
			t.Fatalf("%v: exit %d: %s", tc.flags, r.code, r.stderr)
		}
		for _, rec := range readRecords(t, dir) {
			if rec.HasReward || rec.FailureClass == "" || (tc.class != "" && string(rec.FailureClass) != tc.class) || rec.Attempts != 3 {
				t.Errorf("%v: task %d: has reward %v, class %q (want %q), %d attempts (want seed + 2): %s",
					tc.flags, rec.TaskIndex, rec.HasReward, rec.FailureClass, tc.class, rec.Attempts, rec.Error)
			}
		}
	}

	url, stop := startCommand(t, "serve", "counter", "--chaos-fail-rate", "1", "--chaos-endpoints", "seed_session")
	resp, err := http.Post(url+"/seed_session", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || !json.Valid(body) || !strings.Contains(string(body), "chaos") {
		t.Errorf("seed_session under --chaos-fail-rate 1: %d %s", resp.StatusCode, body)
	}
	resp, err = http.Post(url+"/get_counter_value", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == 500 {
		t.Error("a tool call outside --chaos-endpoints failed")
	}
	if code := stop(); code != 0 {
		t.Errorf("serve: exit %d", code)
	}

	for _, args := range [][]string{
		{"serve", "counter", "--chaos-fail-rate", "1.5"},
		{"serve", "counter", "--chaos-hang-rate", "-1"},
		{"serve", "counter", "--chaos-endpoints", "../verify"},
		{"sim", "--connection-reset", "2"},
		{"run", "--input", input, "--out", t.TempDir(), "--model-url", "builtin:sim", "--server", "builtin:extraction", "--sim-hang", "1.1"},
	} {
		if r := runCLI(t, context.Background(), nil, args...); r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d; stderr %s", args, r.code, exitUsage, r.stderr)
		}
	}
}

// A --model-url with credentials: its query (Azure's ?api-version=, a key) goes with every
// request, after the path (not inside it); the password and the query key reach no file, no
// output, even from an endpoint that echoes its URL; the manifest keeps the URL with them
// redacted.
func TestSecurityModelURLCredentials(t *testing.T) {
	const password = "pw-secret-4242424242"
	const qkey = "qk-secret-1717171717"
	var bad atomic.Int64
	m := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/openai/v1/chat/completions" || r.URL.Query().Get("api-version") != "2024-10-21" || r.URL.Query().Get("api-key") != qkey {
			bad.Add(1)
			http.Error(w, "no such route: "+r.URL.String(), http.StatusNotFound)
			return
		}
		var req map[string]any
		json.NewDecoder(r.Body).Decode(&req)
		msgs := req["messages"].([]any)
		if msgs[len(msgs)-1].(map[string]any)["role"] == "tool" {
			user, pass, _ := r.BasicAuth()
			writeChat(w, "sunny; you called "+r.URL.String()+" as "+user+":"+pass)
			return
		}
		writeChat(w, "", map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"SF"}`}})
	}))
	t.Cleanup(m.Close)
	host := strings.TrimPrefix(m.URL, "http://")
	modelURL := "http://user:" + password + "@" + host + "/openai/v1?api-version=2024-10-21&api-key=" + qkey
	out := t.TempDir()
	jsonl := filepath.Join(t.TempDir(), "ng.jsonl")
	r := runCLI(t, context.Background(), nil, "run", "--input", weatherRows(t, 3, ""), "--out", out, "--jsonl-out", jsonl,
		"--model-url", modelURL, "--model", "m", "--server", "builtin:example_single_tool_call", "--quiet", "--no-preflight") // TestPreflight checks its URL
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d requests reached a wrong URL (the query was not sent apart from the path)", n)
	}
	for _, rec := range readRecords(t, out) {
		if !rec.HasReward {
			t.Errorf("record %d: %s %s", rec.TaskIndex, rec.FailureClass, rec.Error)
		}
	}
	for _, secret := range []string{password, qkey} {
		for _, w := range leaks(t, secret, []string{out}, []string{jsonl}, map[string]string{"stdout": r.stdout, "stderr": r.stderr}) {
			t.Errorf("a credential of --model-url leaked: %s", w)
		}
	}
	mf, err := rundir.ReadManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"model_url": "http://REDACTED@` + host + `/openai/v1?api-key=REDACTED\u0026api-version=REDACTED"`; !strings.Contains(string(mf.Config), want) {
		t.Errorf("manifest config %s, want %s", mf.Config, want)
	}
	if traj := readFile(t, filepath.Join(out, rundir.TrajectoriesFile)); !strings.Contains(traj, "api-key=[REDACTED]") || !strings.Contains(traj, "user:[REDACTED]") {
		t.Errorf("the echoed URL is not in the trajectories, redacted:\n%s", traj)
	}
}
