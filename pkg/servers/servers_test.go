package servers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// ---- helpers ----

func startServer(t *testing.T, name string) *httptest.Server {
	t.Helper()
	h, err := New(name, Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h) // loopback
	t.Cleanup(srv.Close)
	return srv
}

// session is one rollout's client: its own cookie jar.
type testSession struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newSession(t *testing.T, srv *httptest.Server) *testSession {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &testSession{t: t, base: srv.URL, c: &http.Client{Jar: jar}}
}

func (s *testSession) do(method, path string, body []byte) (int, []byte, http.Header) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.base+path, bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.c.Do(req)
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

func (s *testSession) post(path string, body []byte) (int, []byte) {
	s.t.Helper()
	code, out, _ := s.do(http.MethodPost, path, body)
	return code, out
}

// mustPost posts and wants a 200.
func (s *testSession) mustPost(path string, body []byte) []byte {
	s.t.Helper()
	code, out := s.post(path, body)
	if code != http.StatusOK {
		s.t.Fatalf("POST %s %s: %d %s", path, body, code, out)
	}
	return out
}

func (s *testSession) verify(row []byte, response json.RawMessage) map[string]any {
	s.t.Helper()
	return decode(s.t, s.mustPost("/verify", withResponse(s.t, row, response)))
}

func decode(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return m
}

func readJSONL(t *testing.T, path string) [][]byte {
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

func dataPath(server, file string) string {
	return filepath.Join("..", "..", "testdata", "nemo-gym", server, file)
}

// userText is the content of the last user message of a row's responses_create_params.input.
func userText(t *testing.T, row []byte) string {
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

func findTaskRow(t *testing.T, rows [][]byte, text string) []byte {
	t.Helper()
	var found []byte
	for _, row := range rows {
		if userText(t, row) == text {
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

// withResponse is the verify body: the task row plus "response".
func withResponse(t *testing.T, row []byte, response json.RawMessage) []byte {
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

// setField returns row with key set to value (or removed when value is nil).
func setField(t *testing.T, row []byte, key string, value any) []byte {
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

type item struct {
	Type      string `json:"type"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	CallID    string `json:"call_id"`
	Output    string `json:"output"`
}

func outputItems(t *testing.T, response json.RawMessage) []item {
	t.Helper()
	var r struct {
		Output []item `json:"output"`
	}
	if err := json.Unmarshal(response, &r); err != nil {
		t.Fatal(err)
	}
	return r.Output
}

// mutateOutput rewrites response.output; items are generic maps.
func mutateOutput(t *testing.T, response json.RawMessage, f func([]map[string]any) []map[string]any) json.RawMessage {
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

func withoutKey(t *testing.T, obj json.RawMessage, key string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, key)
	out, _ := json.Marshal(m)
	return out
}

type record struct {
	raw      map[string]json.RawMessage
	response json.RawMessage
	task     []byte
}

func loadRecords(t *testing.T, server string) []record {
	t.Helper()
	tasks := readJSONL(t, dataPath(server, "example.jsonl"))
	var recs []record
	for _, line := range readJSONL(t, dataPath(server, "example_rollouts.jsonl")) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, record{raw: m, response: m["response"], task: findTaskRow(t, tasks, userText(t, line))})
	}
	if len(recs) == 0 {
		t.Fatalf("%s: no rollout records", server)
	}
	return recs
}

// replay runs one record against srv with a fresh session: seed, every function call in order
// (with exact, each answer must equal the recorded tool output byte for byte), then verify.
func replay(t *testing.T, srv *httptest.Server, task []byte, response json.RawMessage, exact bool) map[string]any {
	t.Helper()
	s := newSession(t, srv)
	if out := s.mustPost("/seed_session", task); string(out) != "{}" {
		t.Fatalf("seed_session answered %s", out)
	}
	items := outputItems(t, response)
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
		out := s.mustPost("/"+it.Name, []byte(it.Arguments))
		if want, ok := recorded[it.CallID]; exact && ok && string(out) != want {
			t.Errorf("%s(%s) = %s, recorded %s", it.Name, it.Arguments, out, want)
		}
	}
	return s.verify(task, response)
}

func wantFields(t *testing.T, got map[string]any, want map[string]any) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok || !reflect.DeepEqual(g, w) {
			t.Errorf("%s = %#v, want %#v", k, g, w)
		}
	}
}

// ---- replay of NeMo Gym's recorded rollouts ----

func TestReplayRecordedRollouts(t *testing.T) {
	for _, server := range nemoGymExamples {
		t.Run(server, func(t *testing.T) {
			srv := startServer(t, server)
			for i, rec := range loadRecords(t, server) {
				got := replay(t, srv, rec.task, rec.response, true)
				// Every field the record carries besides the request (reward and, for
				// example_multi_step, each component) must be equal.
				want := map[string]any{}
				for k, v := range rec.raw {
					if k == "responses_create_params" || k == "response" {
						continue
					}
					var x any
					if err := json.Unmarshal(v, &x); err != nil {
						t.Fatal(err)
					}
					want[k] = x
				}
				if _, ok := want["reward"]; !ok {
					t.Fatalf("record %d has no reward", i)
				}
				wantFields(t, got, want)
				// The answer echoes the request: the task row's fields and the response.
				task := decode(t, rec.task)
				for k, v := range task {
					if !reflect.DeepEqual(got[k], v) {
						t.Errorf("record %d: echoed %s = %v, want %v", i, k, got[k], v)
					}
				}
				var resp any
				_ = json.Unmarshal(rec.response, &resp)
				if !reflect.DeepEqual(got["response"], resp) {
					t.Errorf("record %d: response not echoed", i)
				}
			}
		})
	}
}

func TestVerifyWritesPythonFloats(t *testing.T) {
	srv := startServer(t, "example_single_tool_call")
	rec := loadRecords(t, "example_single_tool_call")[0]
	s := newSession(t, srv)
	out := s.mustPost("/verify", withResponse(t, rec.task, rec.response))
	if !bytes.HasSuffix(out, []byte(`"reward":1.0}`)) {
		t.Errorf("verify answer ends %q", out[max(0, len(out)-40):])
	}
}

// ---- example_multi_step ----

func TestSynonymValue(t *testing.T) {
	for s, want := range map[string]int64{"Blazing": 711, "Warm": 407, "Hot": 299, "Arid": 384, "é": 233, "": 0} {
		if got := synonymValue(s); got != want {
			t.Errorf("synonymValue(%q) = %d, want %d", s, got, want)
		}
	}
	srv := startServer(t, "example_multi_step")
	s := newSession(t, srv)
	if out := s.mustPost("/get_synonym_value", []byte(`{"synonym":"Blazing"}`)); string(out) != `{"synonym_value": 711}` {
		t.Errorf("get_synonym_value = %s", out)
	}
	if out := s.mustPost("/extract_synonym_values", []byte(`{"synonym_values":[711,407]}`)); string(out) != `{"success": true}` {
		t.Errorf("extract_synonym_values = %s", out)
	}
}

func TestMultiStepMutations(t *testing.T) {
	srv := startServer(t, "example_multi_step")
	rec := loadRecords(t, "example_multi_step")[0]

	setExtract := func(args string) func([]map[string]any) []map[string]any {
		return func(items []map[string]any) []map[string]any {
			for _, it := range items {
				if it["type"] == "function_call" && it["name"] == "extract_synonym_values" {
					it["arguments"] = args
				}
			}
			return items
		}
	}
	drop := func(name string) func([]map[string]any) []map[string]any {
		return func(items []map[string]any) []map[string]any {
			var out []map[string]any
			dropped := ""
			for _, it := range items {
				if dropped == "" && it["type"] == "function_call" && it["name"] == name {
					dropped = it["call_id"].(string)
					continue
				}
				if it["type"] == "function_call_output" && it["call_id"] == dropped {
					continue
				}
				out = append(out, it)
			}
			return out
		}
	}
	appendExtract := func(name, args string) func([]map[string]any) []map[string]any {
		return func(items []map[string]any) []map[string]any {
			return append(items, map[string]any{"type": "function_call", "name": name, "arguments": args, "call_id": "call_x", "id": "fc_x", "status": "completed"})
		}
	}
	result := func(reward float64, parsed []any, accuracy bool, overlap float64, minefield, order bool) map[string]any {
		if parsed == nil {
			parsed = []any{}
		}
		return map[string]any{"reward": reward, "parsed_synonym_values": parsed, "accuracy": accuracy,
			"set_overlap": overlap, "original_term_minefield_hit": minefield, "order_instruction_following_failure": order}
	}

	cases := []struct {
		name   string
		mutate func([]map[string]any) []map[string]any
		want   map[string]any
	}{
		{"as recorded", nil, result(1, []any{711.0, 407.0}, true, 1, false, false)},
		{"values reversed", setExtract(`{"synonym_values":[407,711]}`), result(0, []any{407.0, 711.0}, false, 1, false, true)},
		{"extract call dropped", drop("extract_synonym_values"), result(0, nil, false, 0, false, false)},
		{"lookup call dropped", drop("get_synonym_value"), result(1, []any{711.0, 407.0}, true, 1, false, false)},
		{"one value missing", setExtract(`{"synonym_values":[711]}`), result(0, []any{711.0}, false, 0.5, false, false)},
		{"minefield value", setExtract(`{"synonym_values":[711,407,299]}`), result(0, []any{711.0, 407.0, 299.0}, false, 1, true, true)},
		{"duplicate value", setExtract(`{"synonym_values":[711,711,407]}`), result(0, []any{711.0, 711.0, 407.0}, false, 1, false, true)},
		{"empty list", setExtract(`{"synonym_values":[]}`), result(0, nil, false, 0, false, false)},
		{"floats equal ints", setExtract(`{"synonym_values":[711.0,407]}`), result(1, []any{711.0, 407.0}, true, 1, false, false)},
		{"true equals 1", setExtract(`{"synonym_values":[true]}`), result(0, []any{1.0}, false, 0, false, false)},
		{"numeric strings are not ints", setExtract(`{"synonym_values":["711","407"]}`), result(0, []any{711.0, 407.0}, false, 0, false, false)},
		{"last extract call wins (wrong)", appendExtract("extract_synonym_values", `{"synonym_values":[1,2]}`), result(0, []any{1.0, 2.0}, false, 0, false, false)},
		{"last extract call wins (right)", func(items []map[string]any) []map[string]any {
			return appendExtract("extract_synonym_values", `{"synonym_values":[711,407]}`)(setExtract(`{"synonym_values":[1]}`)(items))
		}, result(1, []any{711.0, 407.0}, true, 1, false, false)},
		{"mcp-namespaced name", appendExtract("mcp__example_multi_step__extract_synonym_values", `{"synonym_values":[407]}`), result(0, []any{407.0}, false, 0.5, false, false)},
		{"other server's namespace ignored", appendExtract("mcp__other__extract_synonym_values", `{"synonym_values":[407]}`), result(1, []any{711.0, 407.0}, true, 1, false, false)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			response := rec.response
			if c.mutate != nil {
				response = mutateOutput(t, response, c.mutate)
			}
			// The server is stateless, so only verify matters (the replay test covers the calls).
			s := newSession(t, srv)
			s.mustPost("/seed_session", rec.task)
			wantFields(t, s.verify(rec.task, response), c.want)
		})
	}

	// What the Python raises: 500 with repr(exception) as a JSON string.
	errCases := []struct {
		name, args, prefix string
		row                []byte
	}{
		{"arguments not JSON", `{"synonym_values":[711,`, "JSONDecodeError(", nil},
		{"arguments empty", ``, "JSONDecodeError(", nil},
		{"no synonym_values", `{"values":[711,407]}`, "KeyError('synonym_values')", nil},
		{"arguments a list", `[711,407]`, "TypeError(", nil},
		{"values not a list", `{"synonym_values":711}`, `TypeError("'int' object is not iterable")`, nil},
		{"values a string", `{"synonym_values":"711"}`, "TypeError(", nil},
		{"nested list", `{"synonym_values":[[711]]}`, `TypeError("unhashable type: 'list'")`, nil},
		{"fractional value", `{"synonym_values":[711.5,407]}`, "ValidationError(", nil},
		{"minefield label", `{"synonym_values":["Hot"]}`, "ValidationError(", nil},
		{"no expected values", `{"synonym_values":[711,407]}`, "ZeroDivisionError('division by zero')", setField(t, rec.task, "expected_synonym_values", []int{})},
	}
	for _, c := range errCases {
		t.Run(c.name, func(t *testing.T) {
			row := rec.task
			if c.row != nil {
				row = c.row
			}
			s := newSession(t, srv)
			code, out := s.post("/verify", withResponse(t, row, mutateOutput(t, rec.response, setExtract(c.args))))
			var msg string
			if code != http.StatusInternalServerError || json.Unmarshal(out, &msg) != nil || !strings.HasPrefix(msg, c.prefix) {
				t.Errorf("verify = %d %s, want 500 %q…", code, out, c.prefix)
			}
		})
	}

	t.Run("cookie lost (stateless server)", func(t *testing.T) {
		// example_multi_step keeps no session state: a verify from a fresh jar scores the same.
		got := newSession(t, srv).verify(rec.task, rec.response)
		wantFields(t, got, result(1, []any{711.0, 407.0}, true, 1, false, false))
	})
}

// ---- example_session_state_mgmt ----

func TestCounterMutations(t *testing.T) {
	srv := startServer(t, "example_session_state_mgmt")
	recs := loadRecords(t, "example_session_state_mgmt")

	for _, rec := range recs {
		// One increment_counter call dropped: the count is off.
		dropped := mutateOutput(t, rec.response, func(items []map[string]any) []map[string]any {
			for i, it := range items {
				if it["name"] == "increment_counter" {
					return append(items[:i:i], items[i+1:]...)
				}
			}
			t.Fatal("no increment_counter call")
			return nil
		})
		if got := replay(t, srv, rec.task, dropped, false); got["reward"] != 0.0 {
			t.Errorf("%s: call dropped: reward %v, want 0", userText(t, rec.task), got["reward"])
		}

		// Cookie lost: the same calls, then verify from a fresh jar. NeMo Gym's verify finds no
		// counter for the new session: reward 0.
		s := newSession(t, srv)
		s.mustPost("/seed_session", rec.task)
		for _, it := range outputItems(t, rec.response) {
			if it.Type == "function_call" {
				s.mustPost("/"+it.Name, []byte(it.Arguments))
			}
		}
		if got := newSession(t, srv).verify(rec.task, rec.response); got["reward"] != 0.0 {
			t.Errorf("cookie lost: reward %v, want 0", got["reward"])
		}
		if got := s.verify(rec.task, rec.response); got["reward"] != 1.0 {
			t.Errorf("same session: reward %v, want 1", got["reward"])
		}
	}

	rec := recs[0] // add 13 then add 14, initial 15, expected 42
	t.Run("no seed", func(t *testing.T) {
		s := newSession(t, srv)
		for _, it := range outputItems(t, rec.response) {
			if it.Type == "function_call" {
				s.mustPost("/"+it.Name, []byte(it.Arguments))
			}
		}
		if got := s.verify(rec.task, rec.response); got["reward"] != 0.0 {
			t.Errorf("reward %v, want 0", got["reward"])
		}
	})
	t.Run("seed twice keeps the first", func(t *testing.T) {
		s := newSession(t, srv)
		s.mustPost("/seed_session", setField(t, rec.task, "initial_count", 1))
		s.mustPost("/seed_session", setField(t, rec.task, "initial_count", 100))
		if out := s.mustPost("/get_counter_value", []byte(`{}`)); string(out) != `{"count": 1}` {
			t.Errorf("get_counter_value = %s", out)
		}
	})
	t.Run("initial_count defaults to 0", func(t *testing.T) {
		s := newSession(t, srv)
		s.mustPost("/seed_session", setField(t, rec.task, "initial_count", nil))
		s.mustPost("/increment_counter", []byte(`{"count":13}`))
		s.mustPost("/increment_counter", []byte(`{"count":14}`))
		if got := s.verify(setField(t, rec.task, "expected_count", 27), rec.response); got["reward"] != 1.0 {
			t.Errorf("reward %v, want 1", got["reward"])
		}
	})
	t.Run("verify needs expected_count", func(t *testing.T) {
		s := newSession(t, srv)
		code, out := s.post("/verify", withResponse(t, setField(t, rec.task, "expected_count", nil), rec.response))
		if code != http.StatusUnprocessableEntity || !strings.Contains(string(out), `"loc":["body","expected_count"]`) {
			t.Errorf("verify = %d %s", code, out)
		}
	})
	t.Run("bad arguments", func(t *testing.T) {
		s := newSession(t, srv)
		for _, body := range []string{`{}`, `{"count":"many"}`, `{"count":1.5}`, `{"count":null}`, `not json`, ``, `[1]`} {
			if code, out := s.post("/increment_counter", []byte(body)); code != http.StatusUnprocessableEntity || !strings.HasPrefix(string(out), `{"detail":[{`) {
				t.Errorf("increment_counter %s = %d %s", body, code, out)
			}
		}
		// pydantic's lax int: an integral float and an integer string are ints.
		s.mustPost("/increment_counter", []byte(`{"count":2.0}`))
		s.mustPost("/increment_counter", []byte(`{"count":"3"}`))
		if out := s.mustPost("/get_counter_value", nil); string(out) != `{"count": 5}` {
			t.Errorf("get_counter_value = %s", out)
		}
	})
}

func TestSessionsNeverShareState(t *testing.T) {
	srv := startServer(t, "example_session_state_mgmt")
	recs := loadRecords(t, "example_session_state_mgmt")
	tasks := readJSONL(t, dataPath("example_session_state_mgmt", "example.jsonl"))
	a, b := newSession(t, srv), newSession(t, srv)
	rowA := findTaskRow(t, tasks, "add 1 then add 2 then get the count")
	rowB := findTaskRow(t, tasks, "add 4 then add 5 then get the count")
	a.mustPost("/seed_session", rowA) // initial 3, expected 6
	b.mustPost("/seed_session", rowB) // initial 6, expected 15
	a.mustPost("/increment_counter", []byte(`{"count":1}`))
	b.mustPost("/increment_counter", []byte(`{"count":4}`))
	a.mustPost("/increment_counter", []byte(`{"count":2}`))
	b.mustPost("/increment_counter", []byte(`{"count":5}`))
	if out := a.mustPost("/get_counter_value", []byte(`{}`)); string(out) != `{"count": 6}` {
		t.Errorf("a: %s", out)
	}
	if out := b.mustPost("/get_counter_value", []byte(`{}`)); string(out) != `{"count": 15}` {
		t.Errorf("b: %s", out)
	}
	resp := recs[0].response
	if got := a.verify(rowA, resp); got["reward"] != 1.0 {
		t.Errorf("a reward %v", got["reward"])
	}
	if got := b.verify(rowB, resp); got["reward"] != 1.0 {
		t.Errorf("b reward %v", got["reward"])
	}
	// Each session's verify against the other's expectation fails.
	if got := a.verify(rowB, resp); got["reward"] != 0.0 {
		t.Errorf("a with b's row: reward %v", got["reward"])
	}

	// Many sessions at once, each with its own jar.
	var wg sync.WaitGroup
	for i := 0; i < 32; i++ {
		s := newSession(t, srv)
		row := setField(t, setField(t, rowA, "initial_count", i), "expected_count", i+10*3)
		wg.Add(1)
		go func(n int) {
			defer wg.Done()
			if code, out := s.post("/seed_session", row); code != http.StatusOK {
				t.Errorf("seed: %d %s", code, out)
				return
			}
			for j := 0; j < 3; j++ {
				if code, out := s.post("/increment_counter", []byte(`{"count":10}`)); code != http.StatusOK {
					t.Errorf("increment: %d %s", code, out)
					return
				}
			}
			code, out := s.post("/verify", withResponse(t, row, resp))
			var m map[string]any
			if code != http.StatusOK || json.Unmarshal(out, &m) != nil || m["reward"] != 1.0 {
				t.Errorf("session %d: verify %d %s", n, code, out)
			}
		}(i)
	}
	wg.Wait()
}

// ---- example_single_tool_call ----

func TestGetWeather(t *testing.T) {
	srv := startServer(t, "example_single_tool_call")
	s := newSession(t, srv)
	if out := s.mustPost("/get_weather", []byte(`{"city":"San Francisco"}`)); string(out) != `{"city": "San Francisco", "weather_description": "The weather in San Francisco is cold."}` {
		t.Errorf("get_weather = %s", out)
	}
	// Written like Python's json.dumps: non-ASCII escaped, no HTML escaping.
	if out := s.mustPost("/get_weather", []byte(`{"city":"Zürich <&> 🌧"}`)); string(out) != `{"city": "Z\u00fcrich <&> \ud83c\udf27", "weather_description": "The weather in Z\u00fcrich <&> \ud83c\udf27 is cold."}` {
		t.Errorf("get_weather = %s", out)
	}
	for _, body := range []string{`{}`, `{"city":7}`, `{"town":"Paris"}`} {
		if code, out := s.post("/get_weather", []byte(body)); code != http.StatusUnprocessableEntity {
			t.Errorf("get_weather %s = %d %s", body, code, out)
		}
	}
}

// ---- protocol: strict verify, routing, sessions ----

func TestStrictVerify(t *testing.T) {
	for _, server := range nemoGymExamples {
		t.Run(server, func(t *testing.T) {
			srv := startServer(t, server)
			rec := loadRecords(t, server)[0]
			s := newSession(t, srv)
			expect422 := func(name string, body []byte, mention ...string) {
				t.Helper()
				code, out := s.post("/verify", body)
				if code != http.StatusUnprocessableEntity {
					t.Errorf("%s: %d %s, want 422", name, code, out)
					return
				}
				for _, m := range mention {
					if !strings.Contains(string(out), m) {
						t.Errorf("%s: %s does not mention %s", name, out, m)
					}
				}
			}

			var params map[string]json.RawMessage
			_ = json.Unmarshal(decodeRaw(t, rec.task)["responses_create_params"], &params)
			params["frobnicate"] = json.RawMessage(`true`)
			row := setField(t, rec.task, "responses_create_params", params)
			expect422("unknown params key", withResponse(t, row, rec.response),
				`"type":"extra_forbidden"`, `"loc":["body","responses_create_params","frobnicate"]`)

			delete(params, "frobnicate")
			delete(params, "input")
			expect422("params without input", withResponse(t, setField(t, rec.task, "responses_create_params", params), rec.response),
				`"loc":["body","responses_create_params","input"]`)
			expect422("no params", withResponse(t, setField(t, rec.task, "responses_create_params", nil), rec.response),
				`"loc":["body","responses_create_params"]`)

			for _, key := range []string{"id", "created_at", "model", "object", "output", "parallel_tool_calls", "tool_choice", "tools"} {
				expect422("response without "+key, withResponse(t, rec.task, withoutKey(t, rec.response, key)),
					`"type":"missing"`, `"loc":["body","response","`+key+`"]`)
			}
			expect422("no response", rec.task, `"loc":["body","response"]`)
			expect422("not an object", []byte(`[1,2]`), "model_attributes_type")
			expect422("not JSON", []byte(`{"response":`), "json_invalid")

			var resp map[string]json.RawMessage
			_ = json.Unmarshal(rec.response, &resp)
			resp["object"] = json.RawMessage(`"chat.completion"`)
			bad, _ := json.Marshal(resp)
			expect422("wrong object", withResponse(t, rec.task, bad), `"loc":["body","response","object"]`)

			untyped := mutateOutput(t, rec.response, func(items []map[string]any) []map[string]any {
				delete(items[0], "type")
				return items
			})
			expect422("output item without type", withResponse(t, rec.task, untyped), "type discriminator")

			// All the keys a NeMo Gym record's responses_create_params carries are accepted,
			// null values included.
			var full map[string]json.RawMessage
			_ = json.Unmarshal(rec.raw["responses_create_params"], &full)
			if code, out := s.post("/verify", withResponse(t, setField(t, rec.task, "responses_create_params", full), rec.response)); code != http.StatusOK {
				t.Errorf("record's own params: %d %s", code, out)
			}
		})
	}
}

func decodeRaw(t *testing.T, data []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRoutingAndCookies(t *testing.T) {
	srv := startServer(t, "example_session_state_mgmt")
	s := newSession(t, srv)
	cookieName := "StatefulCounterResourcesServer___example_session_state_mgmt"

	code, out, hdr := s.do(http.MethodGet, "/", nil)
	if code != http.StatusOK || string(out) != `{"status":"ok"}` {
		t.Errorf("GET / = %d %s", code, out)
	}
	if c := hdr.Get("Set-Cookie"); !strings.HasPrefix(c, cookieName+"=") || !strings.Contains(c, "HttpOnly") {
		t.Errorf("Set-Cookie = %q", c)
	}

	for _, c := range []struct {
		method, path string
		body         string
		code         int
	}{
		{http.MethodPost, "/no_such_tool", `{}`, http.StatusNotFound},
		{http.MethodPost, "/increment_counter/x", `{}`, http.StatusNotFound},
		{http.MethodGet, "/verify", ``, http.StatusMethodNotAllowed},
		{http.MethodGet, "/increment_counter", ``, http.StatusMethodNotAllowed},
		{http.MethodPost, "/", `{}`, http.StatusMethodNotAllowed},
		{http.MethodPost, "/increment_counter", `{"count":"x"}`, http.StatusUnprocessableEntity},
		{http.MethodPost, "/seed_session", `"row"`, http.StatusUnprocessableEntity},
		{http.MethodPost, "/seed_session", `{"initial_count":"x"}`, http.StatusUnprocessableEntity},
	} {
		code, out, hdr := s.do(c.method, c.path, []byte(c.body))
		if code != c.code {
			t.Errorf("%s %s = %d %s, want %d", c.method, c.path, code, out, c.code)
		}
		if !json.Valid(out) {
			t.Errorf("%s %s: body not JSON: %s", c.method, c.path, out)
		}
		if !strings.HasPrefix(hdr.Get("Set-Cookie"), cookieName+"=") {
			t.Errorf("%s %s: no session cookie", c.method, c.path)
		}
	}

	// The cookie keeps the session; a tampered or foreign cookie starts a new one.
	s.mustPost("/seed_session", []byte(`{"initial_count":5}`))
	if out := s.mustPost("/get_counter_value", nil); string(out) != `{"count": 5}` {
		t.Fatalf("get_counter_value = %s", out)
	}
	u, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	var value string
	for _, c := range s.c.Jar.Cookies(u.URL) {
		if c.Name == cookieName {
			value = c.Value
		}
	}
	sid, _, _ := strings.Cut(value, ".")
	other := startServer(t, "example_session_state_mgmt") // same server, another key
	for name, cookie := range map[string]string{
		"tampered signature": sid + ".AAAA",
		"no signature":       sid,
		"foreign key":        sid + "." + strings.SplitN(cookieFrom(t, other, cookieName), ".", 2)[1],
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/get_counter_value", nil)
		req.AddCookie(&http.Cookie{Name: cookieName, Value: cookie})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != `{"count": 0}` {
			t.Errorf("%s: get_counter_value = %s, want a new session", name, body)
		}
		if got := resp.Header.Get("Set-Cookie"); strings.HasPrefix(got, cookieName+"="+sid+".") {
			t.Errorf("%s: kept the session id", name)
		}
	}
}

func cookieFrom(t *testing.T, srv *httptest.Server, name string) string {
	t.Helper()
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == name {
			return c.Value
		}
	}
	t.Fatal("no cookie")
	return ""
}

func TestNewAndNames(t *testing.T) {
	names := Names()
	want := []string{"example_multi_step", "example_session_state_mgmt", "example_single_tool_call"}
	if !sort.StringsAreSorted(names) {
		t.Errorf("Names() = %v, not sorted", names)
	}
	for _, w := range want {
		if !slices.Contains(names, w) {
			t.Errorf("Names() = %v, without %s", names, w)
		}
	}
	for _, n := range names {
		h, err := New(n, Options{})
		if err != nil || h == nil {
			t.Fatalf("New(%q) = %v, %v", n, h, err)
		}
		if err := h.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	_, err := New("example_nope", Options{})
	if err == nil {
		t.Fatal("New(unknown) succeeded")
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("error %q does not list %s", err, n)
		}
	}
}

func TestPythonJSON(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":"x,\"y\":z","b":[1,2]}`: `{"a": "x,\"y\":z", "b": [1, 2]}`,
		`{"a":"x\\","b":{}}`:          `{"a": "x\\", "b": {}}`,
		`{"é":"ü€"}`:                  `{"\u00e9": "\u00fc\u20ac"}`,
		`[]`:                          `[]`,
	} {
		if got := string(pythonJSON([]byte(in))); got != want {
			t.Errorf("pythonJSON(%s) = %s, want %s", in, got, want)
		}
	}
	for f, want := range map[float64]string{1: "1.0", 0: "0.0", 0.5: "0.5", 2.0 / 3: "0.6666666666666666", 1e21: "1e+21"} {
		if got, _ := PyFloat(f).MarshalJSON(); string(got) != want {
			t.Errorf("pyFloat(%v) = %s, want %s", f, got, want)
		}
	}
}

// nemoGymExamples are the re-implemented NeMo Gym example servers, whose recorded rollouts are
// in testdata/nemo-gym.
var nemoGymExamples = []string{"example_multi_step", "example_session_state_mgmt", "example_single_tool_call"}
