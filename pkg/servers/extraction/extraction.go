package extraction

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/rollout-dev/rollout/pkg/servers/gym"
	"github.com/rollout-dev/rollout/pkg/servers/store"
)

// Builtin is the "extraction" resource server (see extraction).
var Builtin = gym.Builtin{Name: "extraction", Class: "ExtractionResourcesServer", Stateful: true, New: newExtraction}

// extraction is rollout's own multi-step extraction server, the richer sibling of
// example_multi_step (the "multi-step interactions" tutorial): the model must query several data
// sources one after another and aggregate what it finds.
//
// The domain is quarterly sales figures spread over regional databases. Each task row carries
// its own small world ("world": regions, sources, records), which seed_session loads into the
// session. The tools form a chain, each needing the previous one's output:
//
//	list_sources {region}                     → {"region", "sources": [{"name", "kind"}]}
//	find_record_ids {source, product, quarter} → {"source", "ids": [...]}   (archived included)
//	get_record {source, id}                   → {"source", "id", "product", "quarter", "status", "value_key"}
//	read_value {value_key}                    → {"value_key", "value"}
//	submit_answer {values}                    → {"success": true, "count"}
//
// A source's kind is "actuals" (booked sales) or "forecast"; a record's status is "active" or
// "archived" (a superseded revision). Each tool call records the steps it completed in the
// session: "listed:SOURCE" for every source list_sources returned, "found:SOURCE/ID" for every id
// find_record_ids returned, "fetched:SOURCE/ID" and "read:VALUE_KEY".
//
// verify takes from the request "expected_values" (numbers, in the asked order),
// "minefield_values" (values of distractor records: archived revisions, forecasts, regions not
// asked about) and "required_steps" (step keys as above), and from the trajectory the values of
// the LAST submit_answer call. It answers:
//
//	reward         1.0 when accuracy and every required step was done in this session, else 0.0
//	accuracy       submitted values == expected values, in order
//	set_overlap    |distinct expected values submitted| / |distinct expected values|
//	order_failure  not accuracy, but the same values (as a multiset) in another order
//	missing_steps  required steps this session never did (all of them without a session)
//	minefield_hit  a minefield value was submitted
//	reason         "ok", "session_not_found", or what went wrong ("; "-separated)
//	submitted_values  the values parsed from the last submit_answer call
//
// A tool call on a session that was never seeded is answered 409, a name the world does not have
// 404, malformed arguments 422 (all JSON); a verify without session state scores 0 with reason
// "session_not_found".
type extraction struct {
	name  string
	store store.Store

	// worlds caches parsed worlds by the SHA-256 of their JSON: a session's state holds its
	// world's JSON (so that servers sharing a store can serve each other's sessions), and a
	// tool call would otherwise decode all of it. Parsed worlds are shared and never modified.
	mu     sync.Mutex
	worlds map[[sha256.Size]byte]*extractionWorld
}

// extractionWorldCacheSize bounds the cache; when it is full it starts over.
const extractionWorldCacheSize = 4096

func newExtraction(name string, st store.Store) gym.ResourceServer {
	return &extraction{name: name, store: st, worlds: map[[sha256.Size]byte]*extractionWorld{}}
}

// Kinds and statuses of the world.
const (
	extractionActuals  = "actuals"
	extractionForecast = "forecast"
	extractionActive   = "active"
	extractionArchived = "archived"
)

// extractionWorld is one task's data, the row's "world".
type extractionWorld struct {
	Regions []string           `json:"regions"`
	Sources []extractionSource `json:"sources"`
	Records []extractionRecord `json:"records"`
}

type extractionSource struct {
	Name   string `json:"name"`
	Region string `json:"region"`
	Kind   string `json:"kind"`
}

type extractionRecord struct {
	ID       string      `json:"id"`
	Source   string      `json:"source"`
	Product  string      `json:"product"`
	Quarter  string      `json:"quarter"`
	Status   string      `json:"status"`
	ValueKey string      `json:"value_key"`
	Value    json.Number `json:"value"`
}

// extractionState is a session's state in the store: its world (as JSON) and the steps done.
type extractionState struct {
	World json.RawMessage `json:"world"`
	Done  map[string]bool `json:"done"`
}

// decodeState parses a session's stored state and its world.
func (x *extraction) decodeState(data []byte) (*extractionState, *extractionWorld, error) {
	var st extractionState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, nil, &gym.PyError{Class: "ValueError", Msg: "corrupt extraction session state: " + err.Error()}
	}
	if st.Done == nil {
		st.Done = map[string]bool{}
	}
	sum := sha256.Sum256(st.World)
	x.mu.Lock()
	w, ok := x.worlds[sum]
	x.mu.Unlock()
	if ok {
		return &st, w, nil
	}
	w = new(extractionWorld)
	if err := json.Unmarshal(st.World, w); err != nil {
		return nil, nil, &gym.PyError{Class: "ValueError", Msg: "corrupt extraction session state: " + err.Error()}
	}
	x.mu.Lock()
	if len(x.worlds) >= extractionWorldCacheSize {
		clear(x.worlds)
	}
	x.worlds[sum] = w
	x.mu.Unlock()
	return &st, w, nil
}

// Step keys recorded in the session and listed in a row's "required_steps".
func extractionStepListed(source string) string      { return "listed:" + source }
func extractionStepFound(source, id string) string   { return "found:" + source + "/" + id }
func extractionStepFetched(source, id string) string { return "fetched:" + source + "/" + id }
func extractionStepRead(valueKey string) string      { return "read:" + valueKey }

// The tools' errors with their own status, each a FastAPI HTTPException body {"detail": …}
// (gym.DetailError): 409 for a session never seeded, 404 for a region, source, record or
// value_key the world does not have.
var errExtractionNotSeeded = &gym.DetailError{Status: http.StatusConflict,
	Detail: "Session not seeded: POST /seed_session with the task row first, and keep the session cookie for every call."}

// extractionNotFound is the 404 for an argument that names nothing in the world.
func extractionNotFound(format string, args ...any) error {
	return &gym.DetailError{Status: http.StatusNotFound, Detail: fmt.Sprintf(format, args...)}
}

func (x *extraction) Tool(name string) (gym.ToolFunc, bool) {
	switch name {
	case "list_sources":
		return x.listSources, true
	case "find_record_ids":
		return x.findRecordIDs, true
	case "get_record":
		return x.getRecord, true
	case "read_value":
		return x.readValue, true
	case "submit_answer":
		return x.submitAnswer, true
	}
	return nil, false
}

// withState runs fn on the session's world (read only) and its steps done, and stores the steps
// fn left (which also refreshes the session's TTL). A session never seeded is refused.
func (x *extraction) withState(ctx context.Context, sid string, fn func(w *extractionWorld, done map[string]bool) ([]gym.Field, error)) ([]gym.Field, error) {
	var out []gym.Field
	err := x.store.Update(ctx, sid, func(old []byte, ok bool) ([]byte, error) {
		if !ok {
			return nil, errExtractionNotSeeded
		}
		st, w, err := x.decodeState(old)
		if err != nil {
			return nil, err
		}
		f, err := fn(w, st.Done)
		if err != nil {
			return nil, err
		}
		out = f
		return json.Marshal(st)
	})
	return out, err
}

// extractionArgs parses a tool's arguments and its required string arguments (pydantic's str:
// only a JSON string). nullable names optional arguments that may be absent or null.
func extractionArgs(body []byte, names []string, nullable []string) (map[string]string, map[string]bool, error) {
	vals := map[string]string{}
	set := map[string]bool{}
	if _, err := gym.Args(body, func(args *gym.Object, errs *gym.ValidationErrors) {
		for _, n := range names {
			if raw, ok := gym.Required(args, n, []any{"body"}, errs); ok {
				if s, ok := gym.LaxString(raw, []any{"body", n}, errs); ok {
					vals[n] = s
					set[n] = true
				}
			}
		}
		for _, n := range nullable {
			raw, ok := args.Get(n)
			if !ok || gym.IsNull(raw) {
				continue
			}
			if s, ok := gym.LaxString(raw, []any{"body", n}, errs); ok {
				vals[n] = s
				set[n] = true
			}
		}
	}); err != nil {
		return nil, nil, err
	}
	return vals, set, nil
}

func (w *extractionWorld) source(name string) (extractionSource, bool) {
	for _, s := range w.Sources {
		if s.Name == name {
			return s, true
		}
	}
	return extractionSource{}, false
}

func (x *extraction) listSources(ctx context.Context, sid string, body []byte) ([]gym.Field, error) {
	args, _, err := extractionArgs(body, []string{"region"}, nil)
	if err != nil {
		return nil, err
	}
	want := strings.TrimSpace(args["region"])
	return x.withState(ctx, sid, func(w *extractionWorld, done map[string]bool) ([]gym.Field, error) {
		region := ""
		for _, r := range w.Regions {
			if strings.EqualFold(r, want) {
				region = r
			}
		}
		if region == "" {
			return nil, extractionNotFound("Unknown region %q; the regions are %s.", args["region"], strings.Join(w.Regions, ", "))
		}
		type src struct {
			Name string `json:"name"`
			Kind string `json:"kind"`
		}
		sources := []src{}
		for _, s := range w.Sources {
			if s.Region == region {
				sources = append(sources, src{s.Name, s.Kind})
				done[extractionStepListed(s.Name)] = true
			}
		}
		return []gym.Field{{Key: "region", Value: region}, {Key: "sources", Value: sources}}, nil
	})
}

func (x *extraction) findRecordIDs(ctx context.Context, sid string, body []byte) ([]gym.Field, error) {
	args, set, err := extractionArgs(body, []string{"source", "product"}, []string{"quarter"})
	if err != nil {
		return nil, err
	}
	product := strings.TrimSpace(args["product"])
	quarter := strings.TrimSpace(args["quarter"])
	return x.withState(ctx, sid, func(w *extractionWorld, done map[string]bool) ([]gym.Field, error) {
		if _, ok := w.source(args["source"]); !ok {
			return nil, extractionNotFound("Unknown source %q; use a source name from list_sources.", args["source"])
		}
		ids := extractionMatchIDs(w, args["source"], product, quarter, set["quarter"])
		for _, id := range ids {
			done[extractionStepFound(args["source"], id)] = true
		}
		return []gym.Field{{Key: "source", Value: args["source"]}, {Key: "ids", Value: ids}}, nil
	})
}

func (x *extraction) getRecord(ctx context.Context, sid string, body []byte) ([]gym.Field, error) {
	args, _, err := extractionArgs(body, []string{"source", "id"}, nil)
	if err != nil {
		return nil, err
	}
	return x.withState(ctx, sid, func(w *extractionWorld, done map[string]bool) ([]gym.Field, error) {
		if _, ok := w.source(args["source"]); !ok {
			return nil, extractionNotFound("Unknown source %q; use a source name from list_sources.", args["source"])
		}
		for _, r := range w.Records {
			if r.Source == args["source"] && r.ID == args["id"] {
				done[extractionStepFetched(r.Source, r.ID)] = true
				return []gym.Field{{Key: "source", Value: r.Source}, {Key: "id", Value: r.ID}, {Key: "product", Value: r.Product}, {Key: "quarter", Value: r.Quarter},
					{Key: "status", Value: r.Status}, {Key: "value_key", Value: r.ValueKey}}, nil
			}
		}
		return nil, extractionNotFound("No record %q in source %q; use an id that find_record_ids returned for that source.", args["id"], args["source"])
	})
}

func (x *extraction) readValue(ctx context.Context, sid string, body []byte) ([]gym.Field, error) {
	args, _, err := extractionArgs(body, []string{"value_key"}, nil)
	if err != nil {
		return nil, err
	}
	return x.withState(ctx, sid, func(w *extractionWorld, done map[string]bool) ([]gym.Field, error) {
		for _, r := range w.Records {
			if r.ValueKey == args["value_key"] {
				done[extractionStepRead(r.ValueKey)] = true
				return []gym.Field{{Key: "value_key", Value: r.ValueKey}, {Key: "value", Value: r.Value}}, nil
			}
		}
		return nil, extractionNotFound("Unknown value_key %q; use the value_key of a record from get_record.", args["value_key"])
	})
}

func (x *extraction) submitAnswer(ctx context.Context, sid string, body []byte) ([]gym.Field, error) {
	values, err := gym.Arg(body, "values", func(raw json.RawMessage, loc []any, errs *gym.ValidationErrors) ([]float64, bool) {
		return extractionNumbers(raw, loc, false, errs)
	})
	if err != nil {
		return nil, err
	}
	return x.withState(ctx, sid, func(*extractionWorld, map[string]bool) ([]gym.Field, error) {
		return []gym.Field{{Key: "success", Value: true}, {Key: "count", Value: len(values)}}, nil
	})
}

// extractionNumbers validates raw as a list of numbers. With lax, numeric strings and booleans
// pass as pydantic's lax float would have them; without, only JSON numbers do.
func extractionNumbers(raw json.RawMessage, loc []any, lax bool, errs *gym.ValidationErrors) ([]float64, bool) {
	items, ok := gym.LaxList(raw, loc, errs)
	if !ok {
		return nil, false
	}
	out := make([]float64, len(items))
	for i, it := range items {
		iloc := gym.At(loc, i)
		switch k := gym.JSONKind(it); {
		case k == '0':
			f, err := strconv.ParseFloat(strings.TrimSpace(string(it)), 64)
			if err != nil {
				errs.Add("float_parsing", iloc, "Input should be a finite number", it)
				ok = false
			}
			out[i] = f
		case lax && (k == 't' || k == 'f'):
			if k == 't' {
				out[i] = 1
			}
		case lax && k == '"':
			if gym.LaxFloat(it, iloc, errs) {
				var s string
				_ = json.Unmarshal(it, &s)
				out[i], _ = strconv.ParseFloat(strings.TrimSpace(s), 64)
			} else {
				ok = false
			}
		default:
			errs.Add("float_type", iloc, "Input should be a valid number", it)
			ok = false
		}
	}
	return out, ok
}

// SeedSession loads the row's world into a fresh session state (seeding again starts over).
func (x *extraction) SeedSession(ctx context.Context, sid string, row *gym.Object) error {
	var errs gym.ValidationErrors
	raw, ok := gym.Required(row, "world", []any{"body"}, &errs)
	if !ok {
		return errs
	}
	world, ok := extractionParseWorld(raw, &errs)
	if !ok {
		return errs
	}
	worldJSON, err := json.Marshal(&world)
	if err != nil {
		return err
	}
	state, err := json.Marshal(&extractionState{World: worldJSON, Done: map[string]bool{}})
	if err != nil {
		return err
	}
	return x.store.Update(ctx, sid, func([]byte, bool) ([]byte, error) { return state, nil })
}

// extractionParseWorld decodes and checks a row's world: every source named once with a region
// and a kind, every record in a known source with an id unique in its source, a value_key unique
// in the world and a numeric value. Regions default to the sources' regions.
func extractionParseWorld(raw json.RawMessage, errs *gym.ValidationErrors) (extractionWorld, bool) {
	loc := []any{"body", "world"}
	var w extractionWorld
	if gym.JSONKind(raw) != '{' {
		errs.Add("model_attributes_type", loc, "Input should be a valid dictionary or object to extract fields from", raw)
		return w, false
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		errs.Add("value_error", loc, "Value error, "+err.Error(), raw)
		return w, false
	}
	bad := func(l []any, msg string, input any) {
		errs.Add("value_error", gym.At(loc, l...), "Value error, "+msg, input)
	}
	regions := map[string]bool{}
	for _, r := range w.Regions {
		regions[r] = true
	}
	names := map[string]bool{}
	for i, s := range w.Sources {
		switch {
		case s.Name == "" || s.Region == "" || s.Kind == "":
			bad([]any{"sources", i}, "a source needs a name, a region and a kind", s)
		case names[s.Name]:
			bad([]any{"sources", i, "name"}, "duplicate source name", s.Name)
		}
		names[s.Name] = true
		if !regions[s.Region] && s.Region != "" {
			regions[s.Region] = true
			w.Regions = append(w.Regions, s.Region)
		}
	}
	ids := map[string]bool{}
	keys := map[string]bool{}
	for i, r := range w.Records {
		switch {
		case r.ID == "" || r.Source == "" || r.ValueKey == "":
			bad([]any{"records", i}, "a record needs an id, a source and a value_key", r)
		case !names[r.Source]:
			bad([]any{"records", i, "source"}, "unknown source", r.Source)
		case ids[r.Source+"/"+r.ID]:
			bad([]any{"records", i, "id"}, "duplicate record id in its source", r.ID)
		case keys[r.ValueKey]:
			bad([]any{"records", i, "value_key"}, "duplicate value_key", r.ValueKey)
		}
		if _, err := strconv.ParseFloat(string(r.Value), 64); err != nil {
			bad([]any{"records", i, "value"}, "a record's value must be a number", r.Value)
		}
		ids[r.Source+"/"+r.ID] = true
		keys[r.ValueKey] = true
	}
	return w, len(*errs) == 0
}

func (x *extraction) Verify(_ context.Context, st gym.SessionState, req *gym.Object, output []gym.OutputItem, errs *gym.ValidationErrors) ([]gym.Field, error) {
	loc := []any{"body"}
	var expected, minefield []float64
	var steps []string
	if raw, ok := gym.Required(req, "expected_values", loc, errs); ok {
		var listOK bool
		if expected, listOK = extractionNumbers(raw, gym.At(loc, "expected_values"), true, errs); listOK && len(expected) == 0 {
			*errs = append(*errs, gym.FieldError{Type: "too_short", Loc: gym.At(loc, "expected_values"),
				Msg: "List should have at least 1 item after validation, not 0", Input: raw,
				Ctx: map[string]any{"field_type": "List", "min_length": 1, "actual_length": 0}})
		}
	}
	if raw, ok := gym.Required(req, "minefield_values", loc, errs); ok {
		minefield, _ = extractionNumbers(raw, gym.At(loc, "minefield_values"), true, errs)
	}
	if raw, ok := gym.Required(req, "required_steps", loc, errs); ok {
		steps, _ = gym.LaxStringList(raw, gym.At(loc, "required_steps"), errs)
	}
	if len(*errs) > 0 {
		return nil, nil
	}

	// The answer: the values of the last submit_answer call of the trajectory.
	answered, answerOK := false, false
	submitted := []float64{}
	for i := len(output) - 1; i >= 0; i-- {
		it := output[i]
		if it.Type != "function_call" || gym.NormalizeToolName(it.Name, x.name) != "submit_answer" {
			continue
		}
		answered = true
		args, err := gym.ParseBody([]byte(it.Arguments))
		if err != nil {
			break
		}
		raw, ok := args.Get("values")
		if !ok {
			break
		}
		var ignore gym.ValidationErrors
		if vals, ok := extractionNumbers(raw, nil, false, &ignore); ok {
			submitted, answerOK = vals, true
		}
		break
	}

	accuracy := answerOK && slices.Equal(submitted, expected)
	distinct := extractionDistinct(expected)
	overlap := 0
	for _, e := range distinct {
		if slices.Contains(submitted, e) {
			overlap++
		}
	}
	setOverlap := float64(overlap) / float64(len(distinct))
	orderFailure := !accuracy && answerOK && slices.Equal(extractionSorted(submitted), extractionSorted(expected))
	minefieldHit := false
	for _, v := range submitted {
		if slices.Contains(minefield, v) && !slices.Contains(expected, v) {
			minefieldHit = true
		}
	}

	found := st.Found
	done := map[string]bool{}
	if found {
		var state extractionState
		if err := json.Unmarshal(st.Data, &state); err != nil {
			return nil, &gym.PyError{Class: "ValueError", Msg: "corrupt extraction session state: " + err.Error()}
		}
		done = state.Done
	}
	var missing []string
	for _, s := range extractionDistinctStrings(steps) {
		if !done[s] {
			missing = append(missing, s)
		}
	}

	var problems []string
	switch {
	case !found:
		problems = append(problems, "session_not_found")
	case accuracy:
	case !answered:
		problems = append(problems, "no_answer")
	case !answerOK:
		problems = append(problems, "invalid_answer")
	case orderFailure:
		problems = append(problems, "order_failure")
	default:
		problems = append(problems, fmt.Sprintf("wrong_values (%d of %d expected values submitted)", overlap, len(distinct)))
	}
	if found && minefieldHit {
		problems = append(problems, "minefield_hit")
	}
	if found && len(missing) > 0 {
		shown := missing
		more := ""
		if len(shown) > 6 {
			shown, more = shown[:6], fmt.Sprintf(", … (%d more)", len(missing)-6)
		}
		problems = append(problems, "missing_steps: "+strings.Join(shown, ", ")+more)
	}
	reward, reason := 0.0, strings.Join(problems, "; ")
	if found && accuracy && len(missing) == 0 {
		reward, reason = 1.0, "ok"
	}
	return []gym.Field{
		{Key: "reward", Value: gym.PyFloat(reward)},
		{Key: "accuracy", Value: accuracy},
		{Key: "set_overlap", Value: gym.PyFloat(setOverlap)},
		{Key: "order_failure", Value: orderFailure},
		{Key: "missing_steps", Value: len(missing)},
		{Key: "minefield_hit", Value: minefieldHit},
		{Key: "reason", Value: reason},
		{Key: "submitted_values", Value: extractionPyNumbers(submitted)},
	}, nil
}

// extractionPyNumbers writes whole numbers as ints and others as floats.
func extractionPyNumbers(vs []float64) []json.Number {
	out := make([]json.Number, len(vs))
	for i, v := range vs {
		out[i] = json.Number(strconv.FormatFloat(v, 'f', -1, 64))
	}
	return out
}

func extractionDistinct(vs []float64) []float64 {
	var out []float64
	for _, v := range vs {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

func extractionDistinctStrings(vs []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range vs {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

func extractionSorted(vs []float64) []float64 {
	out := slices.Clone(vs)
	slices.Sort(out)
	return out
}
