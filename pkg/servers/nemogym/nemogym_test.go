package nemogym

import (
	"github.com/rollout-dev/rollout/pkg/servers/gym"
	"github.com/rollout-dev/rollout/pkg/servers/gym/gymtest"

	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// ---- helpers ----

// examples are the three servers by name.
var examples = map[string]gym.Builtin{MultiStep.Name: MultiStep, SessionStateMgmt.Name: SessionStateMgmt, SingleToolCall.Name: SingleToolCall}

func startServer(t *testing.T, name string) *httptest.Server {
	t.Helper()
	b, ok := examples[name]
	if !ok {
		t.Fatalf("no example server %q", name)
	}
	_, srv := gymtest.Start(t, b, gym.Options{}) // loopback
	return srv
}

// ---- replay of NeMo Gym's recorded rollouts ----

func TestReplayRecordedRollouts(t *testing.T) {
	for _, server := range nemoGymExamples {
		t.Run(server, func(t *testing.T) {
			srv := startServer(t, server)
			for i, rec := range gymtest.LoadRecords(t, server) {
				got := gymtest.Replay(t, srv, rec.Task, rec.Response, true)
				// Every field the record carries besides the request (reward and, for
				// example_multi_step, each component) must be equal.
				want := map[string]any{}
				for k, v := range rec.Raw {
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
				gymtest.WantFields(t, got, want)
				// The answer echoes the request: the task row's fields and the response.
				task := gymtest.Decode(t, rec.Task)
				for k, v := range task {
					if !reflect.DeepEqual(got[k], v) {
						t.Errorf("record %d: echoed %s = %v, want %v", i, k, got[k], v)
					}
				}
				var resp any
				_ = json.Unmarshal(rec.Response, &resp)
				if !reflect.DeepEqual(got["response"], resp) {
					t.Errorf("record %d: response not echoed", i)
				}
			}
		})
	}
}

func TestVerifyWritesPythonFloats(t *testing.T) {
	srv := startServer(t, "example_single_tool_call")
	rec := gymtest.LoadRecords(t, "example_single_tool_call")[0]
	s := gymtest.NewSession(t, srv)
	out := s.MustPost("/verify", gymtest.WithResponse(t, rec.Task, rec.Response))
	if !bytes.HasSuffix(out, []byte(`"reward":1.0}`)) {
		t.Errorf("verify answer ends %q", out[max(0, len(out)-40):])
	}
}

// ---- example_multi_step ----

func TestMultiStepMutations(t *testing.T) {
	srv := startServer(t, "example_multi_step")
	rec := gymtest.LoadRecords(t, "example_multi_step")[0]

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
			response := rec.Response
			if c.mutate != nil {
				response = gymtest.MutateOutput(t, response, c.mutate)
			}
			// The server is stateless, so only verify matters (the replay test covers the calls).
			s := gymtest.NewSession(t, srv)
			s.MustPost("/seed_session", rec.Task)
			gymtest.WantFields(t, s.Verify(rec.Task, response), c.want)
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
		{"no expected values", `{"synonym_values":[711,407]}`, "ZeroDivisionError('division by zero')", gymtest.SetField(t, rec.Task, "expected_synonym_values", []int{})},
	}
	for _, c := range errCases {
		t.Run(c.name, func(t *testing.T) {
			row := rec.Task
			if c.row != nil {
				row = c.row
			}
			s := gymtest.NewSession(t, srv)
			code, out := s.Post("/verify", gymtest.WithResponse(t, row, gymtest.MutateOutput(t, rec.Response, setExtract(c.args))))
			var msg string
			if code != http.StatusInternalServerError || json.Unmarshal(out, &msg) != nil || !strings.HasPrefix(msg, c.prefix) {
				t.Errorf("verify = %d %s, want 500 %q…", code, out, c.prefix)
			}
		})
	}

	t.Run("cookie lost (stateless server)", func(t *testing.T) {
		// example_multi_step keeps no session state: a verify from a fresh jar scores the same.
		got := gymtest.NewSession(t, srv).Verify(rec.Task, rec.Response)
		gymtest.WantFields(t, got, result(1, []any{711.0, 407.0}, true, 1, false, false))
	})
}

// ---- example_session_state_mgmt ----

func TestCounterMutations(t *testing.T) {
	srv := startServer(t, "example_session_state_mgmt")
	recs := gymtest.LoadRecords(t, "example_session_state_mgmt")

	for _, rec := range recs {
		// One increment_counter call dropped: the count is off.
		dropped := gymtest.MutateOutput(t, rec.Response, func(items []map[string]any) []map[string]any {
			for i, it := range items {
				if it["name"] == "increment_counter" {
					return append(items[:i:i], items[i+1:]...)
				}
			}
			t.Fatal("no increment_counter call")
			return nil
		})
		if got := gymtest.Replay(t, srv, rec.Task, dropped, false); got["reward"] != 0.0 {
			t.Errorf("%s: call dropped: reward %v, want 0", gymtest.UserText(t, rec.Task), got["reward"])
		}

		// Cookie lost: the same calls, then verify from a fresh jar. NeMo Gym's verify finds no
		// counter for the new session: reward 0.
		s := gymtest.NewSession(t, srv)
		s.MustPost("/seed_session", rec.Task)
		for _, it := range gymtest.OutputItems(t, rec.Response) {
			if it.Type == "function_call" {
				s.MustPost("/"+it.Name, []byte(it.Arguments))
			}
		}
		if got := gymtest.NewSession(t, srv).Verify(rec.Task, rec.Response); got["reward"] != 0.0 {
			t.Errorf("cookie lost: reward %v, want 0", got["reward"])
		}
		if got := s.Verify(rec.Task, rec.Response); got["reward"] != 1.0 {
			t.Errorf("same session: reward %v, want 1", got["reward"])
		}
	}

	rec := recs[0] // add 13 then add 14, initial 15, expected 42
	t.Run("no seed", func(t *testing.T) {
		s := gymtest.NewSession(t, srv)
		for _, it := range gymtest.OutputItems(t, rec.Response) {
			if it.Type == "function_call" {
				s.MustPost("/"+it.Name, []byte(it.Arguments))
			}
		}
		if got := s.Verify(rec.Task, rec.Response); got["reward"] != 0.0 {
			t.Errorf("reward %v, want 0", got["reward"])
		}
	})
	t.Run("seed twice keeps the first", func(t *testing.T) {
		s := gymtest.NewSession(t, srv)
		s.MustPost("/seed_session", gymtest.SetField(t, rec.Task, "initial_count", 1))
		s.MustPost("/seed_session", gymtest.SetField(t, rec.Task, "initial_count", 100))
		if out := s.MustPost("/get_counter_value", []byte(`{}`)); string(out) != `{"count": 1}` {
			t.Errorf("get_counter_value = %s", out)
		}
	})
	t.Run("initial_count defaults to 0", func(t *testing.T) {
		s := gymtest.NewSession(t, srv)
		s.MustPost("/seed_session", gymtest.SetField(t, rec.Task, "initial_count", nil))
		s.MustPost("/increment_counter", []byte(`{"count":13}`))
		s.MustPost("/increment_counter", []byte(`{"count":14}`))
		if got := s.Verify(gymtest.SetField(t, rec.Task, "expected_count", 27), rec.Response); got["reward"] != 1.0 {
			t.Errorf("reward %v, want 1", got["reward"])
		}
	})
	t.Run("verify needs expected_count", func(t *testing.T) {
		s := gymtest.NewSession(t, srv)
		code, out := s.Post("/verify", gymtest.WithResponse(t, gymtest.SetField(t, rec.Task, "expected_count", nil), rec.Response))
		if code != http.StatusUnprocessableEntity || !strings.Contains(string(out), `"loc":["body","expected_count"]`) {
			t.Errorf("verify = %d %s", code, out)
		}
	})
	t.Run("bad arguments", func(t *testing.T) {
		s := gymtest.NewSession(t, srv)
		for _, body := range []string{`{}`, `{"count":"many"}`, `{"count":1.5}`, `{"count":null}`, `not json`, ``, `[1]`} {
			if code, out := s.Post("/increment_counter", []byte(body)); code != http.StatusUnprocessableEntity || !strings.HasPrefix(string(out), `{"detail":[{`) {
				t.Errorf("increment_counter %s = %d %s", body, code, out)
			}
		}
		// pydantic's lax int: an integral float and an integer string are ints.
		s.MustPost("/increment_counter", []byte(`{"count":2.0}`))
		s.MustPost("/increment_counter", []byte(`{"count":"3"}`))
		if out := s.MustPost("/get_counter_value", nil); string(out) != `{"count": 5}` {
			t.Errorf("get_counter_value = %s", out)
		}
	})
}

func TestSessionsNeverShareState(t *testing.T) {
	srv := startServer(t, "example_session_state_mgmt")
	recs := gymtest.LoadRecords(t, "example_session_state_mgmt")
	tasks := gymtest.ReadJSONL(t, gymtest.DataPath("example_session_state_mgmt", "example.jsonl"))
	a, b := gymtest.NewSession(t, srv), gymtest.NewSession(t, srv)
	rowA := gymtest.FindTaskRow(t, tasks, "add 1 then add 2 then get the count")
	rowB := gymtest.FindTaskRow(t, tasks, "add 4 then add 5 then get the count")
	a.MustPost("/seed_session", rowA) // initial 3, expected 6
	b.MustPost("/seed_session", rowB) // initial 6, expected 15
	a.MustPost("/increment_counter", []byte(`{"count":1}`))
	b.MustPost("/increment_counter", []byte(`{"count":4}`))
	a.MustPost("/increment_counter", []byte(`{"count":2}`))
	b.MustPost("/increment_counter", []byte(`{"count":5}`))
	if out := a.MustPost("/get_counter_value", []byte(`{}`)); string(out) != `{"count": 6}` {
		t.Errorf("a: %s", out)
	}
	if out := b.MustPost("/get_counter_value", []byte(`{}`)); string(out) != `{"count": 15}` {
		t.Errorf("b: %s", out)
	}
	resp := recs[0].Response
	if got := a.Verify(rowA, resp); got["reward"] != 1.0 {
		t.Errorf("a reward %v", got["reward"])
	}
	if got := b.Verify(rowB, resp); got["reward"] != 1.0 {
		t.Errorf("b reward %v", got["reward"])
	}
	// Each session's verify against the other's expectation fails.
	if got := a.Verify(rowB, resp); got["reward"] != 0.0 {
		t.Errorf("a with b's row: reward %v", got["reward"])
	}

	// Many sessions at once, each with its own jar.
	var wg sync.WaitGroup
	for i := 0; i < 32; i++ {
		s := gymtest.NewSession(t, srv)
		row := gymtest.SetField(t, gymtest.SetField(t, rowA, "initial_count", i), "expected_count", i+10*3)
		wg.Add(1)
		go func(n int) {
			defer wg.Done()
			if code, out := s.Post("/seed_session", row); code != http.StatusOK {
				t.Errorf("seed: %d %s", code, out)
				return
			}
			for j := 0; j < 3; j++ {
				if code, out := s.Post("/increment_counter", []byte(`{"count":10}`)); code != http.StatusOK {
					t.Errorf("increment: %d %s", code, out)
					return
				}
			}
			code, out := s.Post("/verify", gymtest.WithResponse(t, row, resp))
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
	s := gymtest.NewSession(t, srv)
	if out := s.MustPost("/get_weather", []byte(`{"city":"San Francisco"}`)); string(out) != `{"city": "San Francisco", "weather_description": "The weather in San Francisco is cold."}` {
		t.Errorf("get_weather = %s", out)
	}
	// Written like Python's json.dumps: non-ASCII escaped, no HTML escaping.
	if out := s.MustPost("/get_weather", []byte(`{"city":"Zürich <&> 🌧"}`)); string(out) != `{"city": "Z\u00fcrich <&> \ud83c\udf27", "weather_description": "The weather in Z\u00fcrich <&> \ud83c\udf27 is cold."}` {
		t.Errorf("get_weather = %s", out)
	}
	for _, body := range []string{`{}`, `{"city":7}`, `{"town":"Paris"}`} {
		if code, out := s.Post("/get_weather", []byte(body)); code != http.StatusUnprocessableEntity {
			t.Errorf("get_weather %s = %d %s", body, code, out)
		}
	}
}

// ---- protocol: strict verify, routing, sessions ----

func TestStrictVerify(t *testing.T) {
	for _, server := range nemoGymExamples {
		t.Run(server, func(t *testing.T) {
			srv := startServer(t, server)
			rec := gymtest.LoadRecords(t, server)[0]
			s := gymtest.NewSession(t, srv)
			expect422 := func(name string, body []byte, mention ...string) {
				t.Helper()
				code, out := s.Post("/verify", body)
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
			_ = json.Unmarshal(decodeRaw(t, rec.Task)["responses_create_params"], &params)
			params["frobnicate"] = json.RawMessage(`true`)
			row := gymtest.SetField(t, rec.Task, "responses_create_params", params)
			expect422("unknown params key", gymtest.WithResponse(t, row, rec.Response),
				`"type":"extra_forbidden"`, `"loc":["body","responses_create_params","frobnicate"]`)

			delete(params, "frobnicate")
			delete(params, "input")
			expect422("params without input", gymtest.WithResponse(t, gymtest.SetField(t, rec.Task, "responses_create_params", params), rec.Response),
				`"loc":["body","responses_create_params","input"]`)
			expect422("no params", gymtest.WithResponse(t, gymtest.SetField(t, rec.Task, "responses_create_params", nil), rec.Response),
				`"loc":["body","responses_create_params"]`)

			for _, key := range []string{"id", "created_at", "model", "object", "output", "parallel_tool_calls", "tool_choice", "tools"} {
				expect422("response without "+key, gymtest.WithResponse(t, rec.Task, gymtest.WithoutKey(t, rec.Response, key)),
					`"type":"missing"`, `"loc":["body","response","`+key+`"]`)
			}
			expect422("no response", rec.Task, `"loc":["body","response"]`)
			expect422("not an object", []byte(`[1,2]`), "model_attributes_type")
			expect422("not JSON", []byte(`{"response":`), "json_invalid")

			var resp map[string]json.RawMessage
			_ = json.Unmarshal(rec.Response, &resp)
			resp["object"] = json.RawMessage(`"chat.completion"`)
			bad, _ := json.Marshal(resp)
			expect422("wrong object", gymtest.WithResponse(t, rec.Task, bad), `"loc":["body","response","object"]`)

			untyped := gymtest.MutateOutput(t, rec.Response, func(items []map[string]any) []map[string]any {
				delete(items[0], "type")
				return items
			})
			expect422("output item without type", gymtest.WithResponse(t, rec.Task, untyped), "type discriminator")

			// All the keys a NeMo Gym record's responses_create_params carries are accepted,
			// null values included.
			var full map[string]json.RawMessage
			_ = json.Unmarshal(rec.Raw["responses_create_params"], &full)
			if code, out := s.Post("/verify", gymtest.WithResponse(t, gymtest.SetField(t, rec.Task, "responses_create_params", full), rec.Response)); code != http.StatusOK {
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
	s := gymtest.NewSession(t, srv)
	cookieName := "StatefulCounterResourcesServer___example_session_state_mgmt"

	code, out, hdr := s.Do(http.MethodGet, "/", nil)
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
		code, out, hdr := s.Do(c.method, c.path, []byte(c.body))
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
	s.MustPost("/seed_session", []byte(`{"initial_count":5}`))
	if out := s.MustPost("/get_counter_value", nil); string(out) != `{"count": 5}` {
		t.Fatalf("get_counter_value = %s", out)
	}
	u, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	var value string
	for _, c := range s.Client.Jar.Cookies(u.URL) {
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

// nemoGymExamples are the re-implemented NeMo Gym example servers, whose recorded rollouts are
// in testdata/nemo-gym.
var nemoGymExamples = []string{"example_multi_step", "example_session_state_mgmt", "example_single_tool_call"}
