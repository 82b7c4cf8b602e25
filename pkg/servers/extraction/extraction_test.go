package extraction

import (
	"github.com/rollout-dev/rollout/pkg/servers/gym"
	"github.com/rollout-dev/rollout/pkg/servers/gym/gymtest"

	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/plan"
)

var updateExtraction = flag.Bool("update-extraction", false, "rewrite data/extraction.jsonl as Generate(seed 1, 240 rows)")

const (
	extractionDataFile = "../../../data/extraction.jsonl"
	extractionDataSeed = 1
	extractionDataRows = 240
)

func generateExtraction(t *testing.T, seed int64, n int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Generate(&b, seed, n); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestExtractionGeneratorDeterministic(t *testing.T) {
	a, b := generateExtraction(t, 42, 60), generateExtraction(t, 42, 60)
	if !bytes.Equal(a, b) {
		t.Fatal("same seed, different output")
	}
	if bytes.Equal(a, generateExtraction(t, 43, 60)) {
		t.Fatal("different seeds, same output")
	}
	if got := bytes.Count(a, []byte("\n")); got != 60 {
		t.Errorf("%d lines, want 60", got)
	}
	// A shorter run is a prefix of a longer one with the same seed.
	if short := generateExtraction(t, 42, 12); !bytes.HasPrefix(a, short) {
		t.Error("12 rows are not a prefix of 60 rows")
	}
	if out := generateExtraction(t, 42, 0); len(out) != 0 {
		t.Errorf("n=0 wrote %d bytes", len(out))
	}
}

// TestExtractionDataFile guards data/extraction.jsonl against drift from the generator
// (regenerate with go test ./pkg/servers -run TestExtractionDataFile -update-extraction).
func TestExtractionDataFile(t *testing.T) {
	want := generateExtraction(t, extractionDataSeed, extractionDataRows)
	if *updateExtraction {
		if err := os.WriteFile(extractionDataFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(extractionDataFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from GenerateExtraction(%d, %d); regenerate with -update-extraction", extractionDataFile, extractionDataSeed, extractionDataRows)
	}
	if len(got) > 2<<20 {
		t.Errorf("%s is %d bytes, want < 2 MiB", extractionDataFile, len(got))
	}
}

// extractionTaskRow is the part of a row the tests read.
type extractionTaskRow struct {
	ID         string `json:"id"`
	Category   string `json:"category"`
	Difficulty string `json:"difficulty"`
	Params     struct {
		Input []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"input"`
		Tools json.RawMessage `json:"tools"`
	} `json:"responses_create_params"`
	World     extractionWorld `json:"world"`
	Expected  []json.Number   `json:"expected_values"`
	Minefield []json.Number   `json:"minefield_values"`
	Steps     []string        `json:"required_steps"`
	Plan      json.RawMessage `json:"reference_plan"`

	raw  []byte
	plan *plan.Plan
}

func extractionRows(t *testing.T) []*extractionTaskRow {
	t.Helper()
	var rows []*extractionTaskRow
	for i, line := range gymtest.ReadJSONL(t, extractionDataFile) {
		r := &extractionTaskRow{raw: line}
		if err := json.Unmarshal(line, r); err != nil {
			t.Fatalf("row %d: %v", i+1, err)
		}
		p, err := plan.Parse(r.Plan)
		if err != nil {
			t.Fatalf("row %d (%s): reference_plan: %v", i+1, r.ID, err)
		}
		r.plan = p
		rows = append(rows, r)
	}
	if len(rows) != extractionDataRows {
		t.Fatalf("%d rows, want %d", len(rows), extractionDataRows)
	}
	return rows
}

func TestExtractionDataSpread(t *testing.T) {
	rows := extractionRows(t)
	combos := map[string]int{}
	questions := map[string]bool{}
	ids := map[string]bool{}
	for _, r := range rows {
		combos[r.Category+"/"+r.Difficulty]++
		if ids[r.ID] {
			t.Errorf("duplicate id %s", r.ID)
		}
		ids[r.ID] = true
		if len(r.Params.Input) != 1 || r.Params.Input[0].Role != "user" {
			t.Fatalf("%s: input %+v", r.ID, r.Params.Input)
		}
		q := r.Params.Input[0].Content
		if questions[q] {
			t.Errorf("%s: duplicate question %q", r.ID, q)
		}
		questions[q] = true

		// Nothing the answer needs is in the question: no value, source, id or value_key (a
		// value may look like a quarter's year).
		bare := q
		for _, quarter := range extractionQuarters {
			bare = strings.ReplaceAll(bare, quarter, "")
		}
		for _, rec := range r.World.Records {
			for _, s := range []string{string(rec.Value), rec.ID, rec.ValueKey, rec.Source} {
				if strings.Contains(bare, s) {
					t.Errorf("%s: question mentions %q", r.ID, s)
				}
			}
		}
		// At least two sequential rounds of calls before the answer; the answer comes last.
		if n := len(r.plan.Rounds); n < 3 {
			t.Errorf("%s: %d rounds", r.ID, n)
		}
		last := r.plan.Rounds[len(r.plan.Rounds)-1]
		if len(last) != 1 || last[0].Name != "submit_answer" {
			t.Errorf("%s: last round %+v", r.ID, last)
		}
		if len(r.Expected) == 0 || len(r.Minefield) == 0 || len(r.Steps) < 4 {
			t.Errorf("%s: %d expected values, %d minefield values, %d required steps", r.ID, len(r.Expected), len(r.Minefield), len(r.Steps))
		}
		for _, m := range r.Minefield {
			if slices.Contains(r.Expected, m) {
				t.Errorf("%s: minefield value %s is expected", r.ID, m)
			}
		}
		var tools []map[string]any
		if err := json.Unmarshal(r.Params.Tools, &tools); err != nil || len(tools) != 5 {
			t.Fatalf("%s: tools %s: %v", r.ID, r.Params.Tools, err)
		}
		for _, tool := range tools {
			if tool["type"] != "function" || tool["strict"] != true || tool["parameters"] == nil {
				t.Errorf("%s: tool %v", r.ID, tool)
			}
		}
	}
	for _, c := range extractionCategories {
		for _, d := range extractionDifficulties {
			if combos[c+"/"+d] == 0 {
				t.Errorf("no %s/%s task", c, d)
			}
		}
	}
	t.Logf("tasks per category/difficulty: %v", combos)
}

// playOptions change how a plan is played.
type playOptions struct {
	skip   int                      // index of a call not to make; -1 for none
	answer func(values []any) []any // rewrites submit_answer's values
}

// playExtraction plays a row's reference plan in session s (seeded by the caller) and returns
// the Responses object of the rollout: every call made and its output (also when the call
// failed, as the runner records it), and the final message.
func playExtraction(t *testing.T, s *gymtest.Session, r *extractionTaskRow, opts playOptions) json.RawMessage {
	t.Helper()
	outputs := map[int]any{}
	lookup := func(i int) (any, bool) { v, ok := outputs[i]; return v, ok }
	var items []any
	idx := -1
	for _, round := range r.plan.Rounds {
		// Calls in a round only reference earlier rounds: resolve them all before any is made.
		type made struct {
			idx  int
			name string
			args json.RawMessage
		}
		var calls []made
		for _, c := range round {
			idx++
			if idx == opts.skip {
				continue
			}
			args, _, err := plan.Resolve(c.Arguments, lookup)
			if err != nil {
				t.Fatal(err)
			}
			if c.Name == "submit_answer" && opts.answer != nil {
				var m map[string]any
				dec := json.NewDecoder(bytes.NewReader(args))
				dec.UseNumber()
				if err := dec.Decode(&m); err != nil {
					t.Fatal(err)
				}
				vals, _ := m["values"].([]any)
				m["values"] = opts.answer(vals)
				args, _ = json.Marshal(m)
			}
			calls = append(calls, made{idx, c.Name, args})
		}
		for _, c := range calls {
			code, out := s.Post("/"+c.name, c.args)
			if code == http.StatusOK {
				outputs[c.idx] = plan.DecodeOutput(string(out))
			}
			callID := fmt.Sprintf("call_%d", c.idx)
			items = append(items,
				map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%d", c.idx), "call_id": callID, "name": c.name, "arguments": string(c.args), "status": "completed"},
				map[string]any{"type": "function_call_output", "call_id": callID, "output": string(out)})
		}
	}
	final, _, err := r.plan.FinalText(lookup)
	if err != nil {
		t.Fatal(err)
	}
	items = append(items, map[string]any{"type": "message", "id": "msg_final", "role": "assistant", "status": "completed",
		"content": []any{map[string]any{"type": "output_text", "text": final, "annotations": []any{}}}})
	resp, err := json.Marshal(map[string]any{
		"id": "resp_" + r.ID, "created_at": 1767225600, "model": "reference-plan", "object": "response",
		"output": items, "parallel_tool_calls": true, "tool_choice": "auto", "tools": r.Params.Tools,
	})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}

func TestExtractionReferencePlansSolveEveryRow(t *testing.T) {
	_, srv := gymtest.Start(t, Builtin, gym.Options{})
	for _, r := range extractionRows(t) {
		t.Run(r.ID, func(t *testing.T) {
			t.Parallel()
			s := gymtest.NewSession(t, srv)
			s.MustPost("/seed_session", r.raw)
			got := s.Verify(r.raw, playExtraction(t, s, r, playOptions{skip: -1}))
			gymtest.WantFields(t, got, map[string]any{"reward": 1.0, "accuracy": true, "set_overlap": 1.0, "order_failure": false,
				"missing_steps": 0.0, "minefield_hit": false, "reason": "ok"})
		})
	}
}

// TestExtractionEveryRequiredCallIsNeeded drops each call of a plan in turn: without a required
// call the reward drops (and missing_steps or accuracy says why); without an optional one it does
// not. Playing every row once per call is some 43,000 requests (`rollout validate --oracle` does
// that), so this takes every 10th row: 24 rows, two of each category and difficulty, since these
// cycle every 12 rows (every 20th with -short).
func TestExtractionEveryRequiredCallIsNeeded(t *testing.T) {
	_, srv := gymtest.Start(t, Builtin, gym.Options{})
	every := 10
	if testing.Short() {
		every = 20
	}
	var rows []*extractionTaskRow
	for i, r := range extractionRows(t) {
		if i%every == 0 {
			rows = append(rows, r)
		}
	}
	for _, r := range rows {
		t.Run(r.ID, func(t *testing.T) {
			t.Parallel()
			for i, c := range r.plan.Calls() {
				s := gymtest.NewSession(t, srv)
				s.MustPost("/seed_session", r.raw)
				got := s.Verify(r.raw, playExtraction(t, s, r, playOptions{skip: i}))
				if c.Optional {
					if got["reward"] != 1.0 {
						t.Errorf("optional call %d %s dropped: reward %v (%v)", i, c.Name, got["reward"], got["reason"])
					}
					continue
				}
				if got["reward"] != 0.0 {
					t.Errorf("required call %d %s dropped: reward %v", i, c.Name, got["reward"])
				}
				if c.Name == "submit_answer" {
					gymtest.WantFields(t, got, map[string]any{"accuracy": false, "missing_steps": 0.0, "reason": "no_answer"})
				} else if num(got["missing_steps"]) < 1 {
					t.Errorf("required call %d %s dropped: missing_steps %v (%v)", i, c.Name, got["missing_steps"], got["reason"])
				}
			}
		})
	}
}

func TestExtractionAnswerMutations(t *testing.T) {
	_, srv := gymtest.Start(t, Builtin, gym.Options{})
	rows := extractionRows(t)
	reversedSeen := 0
	t.Run("reversed", func(t *testing.T) {
		for i, r := range rows {
			if len(r.Expected) < 2 || i%3 != 0 {
				continue
			}
			reversedSeen++
			t.Run(r.ID, func(t *testing.T) {
				t.Parallel()
				s := gymtest.NewSession(t, srv)
				s.MustPost("/seed_session", r.raw)
				got := s.Verify(r.raw, playExtraction(t, s, r, playOptions{skip: -1, answer: func(v []any) []any {
					slices.Reverse(v)
					return v
				}}))
				gymtest.WantFields(t, got, map[string]any{"reward": 0.0, "accuracy": false, "set_overlap": 1.0, "order_failure": true,
					"missing_steps": 0.0, "minefield_hit": false, "reason": "order_failure"})
			})
		}
	})
	if reversedSeen == 0 {
		t.Fatal("no row with two or more values")
	}

	for _, r := range rows[:24] {
		mine := r.Minefield[len(r.Minefield)-1]
		// A minefield value instead of the first expected one.
		s := gymtest.NewSession(t, srv)
		s.MustPost("/seed_session", r.raw)
		got := s.Verify(r.raw, playExtraction(t, s, r, playOptions{skip: -1, answer: func(v []any) []any {
			v[0] = mine
			return v
		}}))
		gymtest.WantFields(t, got, map[string]any{"reward": 0.0, "accuracy": false, "minefield_hit": true, "order_failure": false, "missing_steps": 0.0})
		if reason, _ := got["reason"].(string); !strings.Contains(reason, "minefield_hit") || !strings.HasPrefix(reason, "wrong_values") {
			t.Errorf("%s: reason %q", r.ID, reason)
		}
		wantOverlap := float64(len(r.Expected)-1) / float64(len(r.Expected))
		if len(r.Expected) > 1 && slices.Contains(r.Expected[1:], r.Expected[0]) {
			wantOverlap = 1
		}
		if num(got["set_overlap"]) != wantOverlap {
			t.Errorf("%s: set_overlap %v, want %v", r.ID, got["set_overlap"], wantOverlap)
		}

		// A minefield value on top of the right ones.
		s = gymtest.NewSession(t, srv)
		s.MustPost("/seed_session", r.raw)
		got = s.Verify(r.raw, playExtraction(t, s, r, playOptions{skip: -1, answer: func(v []any) []any { return append(v, mine) }}))
		gymtest.WantFields(t, got, map[string]any{"reward": 0.0, "accuracy": false, "set_overlap": 1.0, "minefield_hit": true, "order_failure": false})

		// Values as floats and a later corrected submission: only the last one counts.
		s = gymtest.NewSession(t, srv)
		s.MustPost("/seed_session", r.raw)
		resp := playExtraction(t, s, r, playOptions{skip: -1, answer: func(v []any) []any {
			for i, x := range v {
				v[i] = json.Number(string(x.(json.Number)) + ".0")
			}
			return v
		}})
		gymtest.WantFields(t, s.Verify(r.raw, resp), map[string]any{"reward": 1.0, "reason": "ok"})
		wrongLast := gymtest.MutateOutput(t, resp, func(items []map[string]any) []map[string]any {
			return append(items, map[string]any{"type": "function_call", "name": "submit_answer", "arguments": `{"values":[1]}`, "call_id": "call_x", "id": "fc_x", "status": "completed"})
		})
		gymtest.WantFields(t, s.Verify(r.raw, wrongLast), map[string]any{"reward": 0.0, "accuracy": false, "submitted_values": []any{1.0}})
		badLast := gymtest.MutateOutput(t, resp, func(items []map[string]any) []map[string]any {
			return append(items, map[string]any{"type": "function_call", "name": "submit_answer", "arguments": `{"values":["x"]`, "call_id": "call_x", "id": "fc_x", "status": "completed"})
		})
		gymtest.WantFields(t, s.Verify(r.raw, badLast), map[string]any{"reward": 0.0, "accuracy": false, "reason": "invalid_answer", "submitted_values": []any{}})
	}
}

func TestExtractionSessions(t *testing.T) {
	_, srv := gymtest.Start(t, Builtin, gym.Options{})
	rows := extractionRows(t)
	r := rows[5]

	t.Run("cookie lost", func(t *testing.T) {
		s := gymtest.NewSession(t, srv)
		s.MustPost("/seed_session", r.raw)
		resp := playExtraction(t, s, r, playOptions{skip: -1})
		got := gymtest.NewSession(t, srv).Verify(r.raw, resp) // a new jar: a new, empty session
		gymtest.WantFields(t, got, map[string]any{"reward": 0.0, "reason": "session_not_found", "missing_steps": float64(len(r.Steps)),
			"accuracy": true, "minefield_hit": false})
		gymtest.WantFields(t, s.Verify(r.raw, resp), map[string]any{"reward": 1.0})
	})

	t.Run("calls in another session", func(t *testing.T) {
		a, b := gymtest.NewSession(t, srv), gymtest.NewSession(t, srv)
		a.MustPost("/seed_session", r.raw)
		b.MustPost("/seed_session", r.raw)
		resp := playExtraction(t, a, r, playOptions{skip: -1})
		got := b.Verify(r.raw, resp) // seeded, but the calls were made in a
		gymtest.WantFields(t, got, map[string]any{"reward": 0.0, "accuracy": true, "missing_steps": float64(len(r.Steps))})
		if reason, _ := got["reason"].(string); !strings.HasPrefix(reason, "missing_steps: ") {
			t.Errorf("reason %q", reason)
		}
	})

	t.Run("seeding again starts over", func(t *testing.T) {
		s := gymtest.NewSession(t, srv)
		s.MustPost("/seed_session", r.raw)
		resp := playExtraction(t, s, r, playOptions{skip: -1})
		s.MustPost("/seed_session", r.raw)
		gymtest.WantFields(t, s.Verify(r.raw, resp), map[string]any{"reward": 0.0, "missing_steps": float64(len(r.Steps))})
	})

	t.Run("unseeded", func(t *testing.T) {
		s := gymtest.NewSession(t, srv)
		for tool, body := range map[string]string{
			"list_sources":    `{"region":"North"}`,
			"find_record_ids": `{"source":"x","product":"Widgets","quarter":null}`,
			"get_record":      `{"source":"x","id":"R-1000"}`,
			"read_value":      `{"value_key":"v-000000"}`,
			"submit_answer":   `{"values":[1,2]}`,
		} {
			code, out := s.Post("/"+tool, []byte(body))
			var m map[string]any
			if code != http.StatusConflict || json.Unmarshal(out, &m) != nil || !strings.HasPrefix(fmt.Sprint(m["detail"]), "Session not seeded") {
				t.Errorf("%s on an unseeded session: %d %s, want 409", tool, code, out)
			}
		}
		// verify without state: reward 0, not an error.
		resp := []byte(`{"id":"resp_1","created_at":1,"model":"m","object":"response","output":[],"parallel_tool_calls":true,"tool_choice":"auto","tools":[]}`)
		gymtest.WantFields(t, s.Verify(r.raw, resp), map[string]any{"reward": 0.0, "reason": "session_not_found", "accuracy": false, "set_overlap": 0.0})
		// /end_session drops the state: the next call is a 409 again.
		s.MustPost("/seed_session", r.raw)
		region := r.World.Regions[0]
		s.MustPost("/list_sources", []byte(`{"region":"`+region+`"}`))
		s.MustPost("/end_session", nil)
		if code, out := s.Post("/list_sources", []byte(`{"region":"`+region+`"}`)); code != http.StatusConflict {
			t.Errorf("after /end_session: %d %s, want 409", code, out)
		}
	})
}

func TestExtractionTools(t *testing.T) {
	_, srv := gymtest.Start(t, Builtin, gym.Options{})
	world := `{"regions":["North","South"],"sources":[
		{"name":"north-actuals-1","region":"North","kind":"actuals"},
		{"name":"north-forecast-1","region":"North","kind":"forecast"},
		{"name":"south-actuals-1","region":"South","kind":"actuals"}],
	"records":[
		{"id":"R-2000","source":"north-actuals-1","product":"Widgets","quarter":"2024-Q1","status":"archived","value_key":"v-a","value":95},
		{"id":"R-1000","source":"north-actuals-1","product":"Widgets","quarter":"2024-Q1","status":"active","value_key":"v-b","value":100},
		{"id":"R-3000","source":"north-actuals-1","product":"Widgets","quarter":"2024-Q2","status":"active","value_key":"v-c","value":110.5},
		{"id":"R-1000","source":"south-actuals-1","product":"Widgets","quarter":"2024-Q1","status":"active","value_key":"v-d","value":200},
		{"id":"R-4000","source":"north-forecast-1","product":"Widgets","quarter":"2024-Q1","status":"active","value_key":"v-e","value":120}]}`
	row := []byte(`{"responses_create_params":{"input":"q"},"world":` + world + `,"expected_values":[100],"minefield_values":[95,120],"required_steps":["listed:north-actuals-1","found:north-actuals-1/R-1000","fetched:north-actuals-1/R-1000","read:v-b"]}`)
	s := gymtest.NewSession(t, srv)
	s.MustPost("/seed_session", row)

	for _, c := range []struct{ tool, args, want string }{
		{"list_sources", `{"region":"north"}`, `{"region": "North", "sources": [{"name": "north-actuals-1", "kind": "actuals"}, {"name": "north-forecast-1", "kind": "forecast"}]}`},
		{"find_record_ids", `{"source":"north-actuals-1","product":"widgets","quarter":"2024-Q1"}`, `{"source": "north-actuals-1", "ids": ["R-1000", "R-2000"]}`},
		{"find_record_ids", `{"source":"north-actuals-1","product":"Widgets","quarter":null}`, `{"source": "north-actuals-1", "ids": ["R-1000", "R-2000", "R-3000"]}`},
		{"find_record_ids", `{"source":"north-actuals-1","product":"Widgets"}`, `{"source": "north-actuals-1", "ids": ["R-1000", "R-2000", "R-3000"]}`},
		{"find_record_ids", `{"source":"north-actuals-1","product":"Gaskets","quarter":null}`, `{"source": "north-actuals-1", "ids": []}`},
		{"get_record", `{"source":"north-actuals-1","id":"R-2000"}`, `{"source": "north-actuals-1", "id": "R-2000", "product": "Widgets", "quarter": "2024-Q1", "status": "archived", "value_key": "v-a"}`},
		{"get_record", `{"source":"south-actuals-1","id":"R-1000"}`, `{"source": "south-actuals-1", "id": "R-1000", "product": "Widgets", "quarter": "2024-Q1", "status": "active", "value_key": "v-d"}`},
		{"read_value", `{"value_key":"v-c"}`, `{"value_key": "v-c", "value": 110.5}`},
		{"submit_answer", `{"values":[100]}`, `{"success": true, "count": 1}`},
	} {
		if out := s.MustPost("/"+c.tool, []byte(c.args)); string(out) != c.want {
			t.Errorf("%s %s = %s, want %s", c.tool, c.args, out, c.want)
		}
	}

	// Not every step done yet: the right answer scores 0 and says which steps are missing.
	resp := func(args string) json.RawMessage {
		return json.RawMessage(`{"id":"r","created_at":1,"model":"m","object":"response","parallel_tool_calls":false,"tool_choice":"auto","tools":[],"output":[` +
			`{"type":"function_call","name":"submit_answer","arguments":` + string(gym.MarshalValue(args)) + `,"call_id":"c1"},` +
			`{"type":"function_call_output","call_id":"c1","output":"{}"},` +
			`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}]}`)
	}
	gymtest.WantFields(t, s.Verify(row, resp(`{"values":[100]}`)), map[string]any{"reward": 0.0, "accuracy": true, "missing_steps": 2.0,
		"reason": "missing_steps: fetched:north-actuals-1/R-1000, read:v-b"})
	s.MustPost("/get_record", []byte(`{"source":"north-actuals-1","id":"R-1000"}`))
	s.MustPost("/read_value", []byte(`{"value_key":"v-b"}`))
	out := s.MustPost("/verify", gymtest.WithResponse(t, row, resp(`{"values":[100]}`)))
	if !bytes.Contains(out, []byte(`"reward":1.0,"accuracy":true,"set_overlap":1.0,"order_failure":false,"missing_steps":0,"minefield_hit":false,"reason":"ok","submitted_values":[100]}`)) {
		t.Errorf("verify = %s", out)
	}
	gymtest.WantFields(t, s.Verify(row, resp(`{"values":[95]}`)), map[string]any{"reward": 0.0, "minefield_hit": true, "set_overlap": 0.0,
		"reason": "wrong_values (0 of 1 expected values submitted); minefield_hit"})
	gymtest.WantFields(t, s.Verify(row, resp(`{"values":[]}`)), map[string]any{"reward": 0.0, "reason": "wrong_values (0 of 1 expected values submitted)"})
	gymtest.WantFields(t, s.Verify(row, resp(`{"values":[true]}`)), map[string]any{"reward": 0.0, "reason": "invalid_answer"})
	gymtest.WantFields(t, s.Verify(row, resp(`{"answer":[100]}`)), map[string]any{"reward": 0.0, "reason": "invalid_answer"})
	// MCP-namespaced tool names count.
	mcp := bytes.Replace(resp(`{"values":[100]}`), []byte(`"name":"submit_answer"`), []byte(`"name":"mcp__extraction__submit_answer"`), 1)
	gymtest.WantFields(t, s.Verify(row, mcp), map[string]any{"reward": 1.0})

	t.Run("bad arguments", func(t *testing.T) {
		for _, c := range []struct{ tool, args, mention string }{
			{"list_sources", `{}`, `"loc":["body","region"]`},
			{"list_sources", `{"region":7}`, `string_type`},

			{"list_sources", `not json`, `json_invalid`},
			{"list_sources", ``, `missing`},
			{"list_sources", `[1]`, `model_attributes_type`},
			{"find_record_ids", `{"source":"north-actuals-1"}`, `"loc":["body","product"]`},
			{"find_record_ids", `{"source":"north-actuals-1","product":"Widgets","quarter":3}`, `"loc":["body","quarter"]`},
			{"find_record_ids", `{"source":null,"product":"Widgets","quarter":null}`, `"loc":["body","source"]`},
			{"get_record", `{"source":"north-actuals-1"}`, `"loc":["body","id"]`},
			{"read_value", `{"value_key":null}`, `string_type`},
			{"submit_answer", `{}`, `"loc":["body","values"]`},
			{"submit_answer", `{"values":7}`, `list_type`},
			{"submit_answer", `{"values":["7"]}`, `"loc":["body","values",0]`},
			{"submit_answer", `{"values":[1,null]}`, `"loc":["body","values",1]`},
			{"submit_answer", `{"values":[true]}`, `float_type`},
		} {
			code, out := s.Post("/"+c.tool, []byte(c.args))
			if code != http.StatusUnprocessableEntity || !strings.HasPrefix(string(out), `{"detail":[{`) || !strings.Contains(string(out), c.mention) {
				t.Errorf("%s %s = %d %s, want 422 mentioning %s", c.tool, c.args, code, out, c.mention)
			}
		}
	})

	t.Run("unknown names", func(t *testing.T) {
		for _, c := range []struct{ tool, args, mention string }{
			{"list_sources", `{"region":"Atlantis"}`, `Unknown region \"Atlantis\"; the regions are North, South.`},
			{"find_record_ids", `{"source":"nowhere","product":"Widgets","quarter":null}`, `Unknown source \"nowhere\"`},
			{"get_record", `{"source":"north-actuals-1","id":"R-9999"}`, `No record \"R-9999\" in source \"north-actuals-1\"`},
			{"get_record", `{"source":"north-forecast-1","id":"R-1000"}`, `No record \"R-1000\"`},
			{"get_record", `{"source":"nowhere","id":"R-1000"}`, `Unknown source`},
			{"read_value", `{"value_key":"v-zzz"}`, `Unknown value_key`},
		} {
			code, out := s.Post("/"+c.tool, []byte(c.args))
			if code != http.StatusNotFound || !strings.HasPrefix(string(out), `{"detail":"`) || !strings.Contains(string(out), c.mention) {
				t.Errorf("%s %s = %d %s, want 404 mentioning %s", c.tool, c.args, code, out, c.mention)
			}
		}
	})

	t.Run("seed errors", func(t *testing.T) {
		for _, c := range []struct{ name, body, mention string }{
			{"no world", `{"expected_values":[1]}`, `"loc":["body","world"]`},
			{"world not an object", `{"world":[1]}`, `model_attributes_type`},
			{"record in an unknown source", `{"world":{"sources":[],"records":[{"id":"R-1","source":"x","value_key":"k","value":1}]}}`, `unknown source`},
			{"value not a number", `{"world":{"sources":[{"name":"a","region":"North","kind":"actuals"}],"records":[{"id":"R-1","source":"a","value_key":"k","value":"many"}]}}`, `"world"`},
			{"duplicate value_key", `{"world":{"sources":[{"name":"a","region":"North","kind":"actuals"}],"records":[{"id":"R-1","source":"a","value_key":"k","value":1},{"id":"R-2","source":"a","value_key":"k","value":2}]}}`, `duplicate value_key`},
			{"source without a region", `{"world":{"sources":[{"name":"a","kind":"actuals"}],"records":[]}}`, `"sources",0`},
		} {
			code, out := gymtest.NewSession(t, srv).Post("/seed_session", []byte(c.body))
			if code != http.StatusUnprocessableEntity || !strings.Contains(string(out), c.mention) {
				t.Errorf("%s: %d %s, want 422 mentioning %s", c.name, code, out, c.mention)
			}
		}
		// Regions default to the sources' regions.
		s := gymtest.NewSession(t, srv)
		s.MustPost("/seed_session", []byte(`{"world":{"sources":[{"name":"a","region":"North","kind":"actuals"}],"records":[]}}`))
		if out := s.MustPost("/list_sources", []byte(`{"region":"North"}`)); string(out) != `{"region": "North", "sources": [{"name": "a", "kind": "actuals"}]}` {
			t.Errorf("list_sources = %s", out)
		}
	})

	t.Run("strict verify", func(t *testing.T) {
		ok := resp(`{"values":[100]}`)
		for _, c := range []struct {
			name, key string
			value     any
			mention   string
		}{
			{"no expected_values", "expected_values", nil, `"loc":["body","expected_values"]`},
			{"no minefield_values", "minefield_values", nil, `"loc":["body","minefield_values"]`},
			{"no required_steps", "required_steps", nil, `"loc":["body","required_steps"]`},
			{"empty expected_values", "expected_values", []int{}, `too_short`},
			{"expected_values not a list", "expected_values", 100, `list_type`},
			{"expected_values not numbers", "expected_values", []any{"x"}, `"loc":["body","expected_values",0]`},
			{"required_steps not strings", "required_steps", []any{1}, `"loc":["body","required_steps",0]`},
		} {
			code, out := s.Post("/verify", gymtest.WithResponse(t, gymtest.SetField(t, row, c.key, c.value), ok))
			if code != http.StatusUnprocessableEntity || !strings.Contains(string(out), c.mention) {
				t.Errorf("%s: %d %s, want 422 mentioning %s", c.name, code, out, c.mention)
			}
		}
		// The handler's own checks apply too.
		if code, out := s.Post("/verify", row); code != http.StatusUnprocessableEntity || !strings.Contains(string(out), `"loc":["body","response"]`) {
			t.Errorf("no response: %d %s", code, out)
		}
		// Lax numbers in the row's expectations, as pydantic's float takes them.
		gymtest.WantFields(t, s.Verify(gymtest.SetField(t, row, "expected_values", []any{"100"}), ok), map[string]any{"reward": 1.0})
	})
}

// A verify of a seeded session is scored on the state it read, or answered 409
// session_not_found, when the Redis restarts empty during the verify (see the counter's test of
// the same name).
func TestSharedStoreRestartDuringVerify(t *testing.T) {
	gymtest.RestartDuringVerify(t, Builtin, func(t *testing.T, s *gymtest.Session) []byte {
		r := extractionRows(t)[5]
		s.MustPost("/seed_session", r.raw)
		return gymtest.WithResponse(t, r.raw, playExtraction(t, s, r, playOptions{skip: -1}))
	})
}
