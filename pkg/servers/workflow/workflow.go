package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/rollout-dev/rollout/pkg/servers/gym"
	"github.com/rollout-dev/rollout/pkg/servers/store"
)

// Builtin is the "workflow" resource server (see workflow).
var Builtin = gym.Builtin{Name: "workflow", Class: "WorkflowResourcesServer", Stateful: true, New: newWorkflow}

// workflow is rollout's multi-step workflow server: the model assembles a data
// pipeline from a component catalogue in three steps, each with its own tools.
//
//  1. discovery: search_components {query}, list_components {kind?}, get_component_info
//     {component_id}: which components exist, their ids, kinds, whether they are deprecated.
//  2. configuration: get_config_schema {component_id} (the JSON Schema of the component's
//     configuration; the credentials and worker pools registered in the workspace appear only
//     there, as the enum of the "credential" / "worker_pool" property) and validate_config
//     {component_id, config} → {valid, errors: [{property, message}], warnings,
//     normalized_config} (normalized: the schema's defaults filled in).
//  3. assembly: assemble_pipeline {components: [{component_id, config}]} (list order is the
//     pipeline order) → pipeline_id; validate_pipeline {pipeline_id} → {valid, errors}; and
//     deploy_pipeline {pipeline_id}, which refuses (deployed false, errors) a pipeline that has
//     not passed validate_pipeline.
//
// Validation is enforced in the environment: validate_pipeline reports every component whose
// configuration has not passed validate_config in this session, and deploy_pipeline needs a
// pipeline that passed validate_pipeline. Validation failures are answers (200, valid false),
// not HTTP errors. Bad arguments are a 422; a tool called on a session that was never seeded is a
// 409; an unknown component id in get_component_info / get_config_schema is a 404.
//
// seed_session loads the row's "catalog" into the session's state (JSON in the session store),
// replacing whatever the session held. verify reads the row's "requirements" ({components:
// [{component_id, kind, name, config}]}, the expected pipeline in order with the configuration
// values it must have) and scores the pipeline deployed last in the session:
//
//	reward = 1.0 iff deployed and components_correct == 1 and config_valid and config_matches
//	deployed                 a pipeline was deployed in this session
//	components_correct       position-wise matches of component ids / max(len(want), len(got))
//	config_valid             every deployed configuration passes its component's schema
//	config_matches           the components are right and every required value is set as required
//	                         (after defaults; numbers by value, lists of values in any order)
//	validated_before_deploy  deployed, and no deploy_pipeline call ever came before its pipeline
//	                         passed validate_pipeline
//	validation_failures      validate_config / validate_pipeline answers with valid false
//	steps_in_order           every step was used and no call went back to an earlier step
//	                         (discovery → configuration → assembly)
//	reason                   "ok", or the first thing that kept the reward from 1.0
//
// A session the server does not know scores 0 with reason "session_not_found".
type workflow struct {
	name  string
	store store.Store
}

func newWorkflow(name string, st store.Store) gym.ResourceServer {
	return &workflow{name: name, store: st}
}

// The workflow's steps: 1 discovery, 2 configuration, 3 assembly.
const (
	workflowDiscovery     = 1
	workflowConfiguration = 2
	workflowAssembly      = 3
)

// workflowToolStep is the step each tool belongs to.
var workflowToolStep = map[string]int{
	"search_components":  workflowDiscovery,
	"list_components":    workflowDiscovery,
	"get_component_info": workflowDiscovery,
	"get_config_schema":  workflowConfiguration,
	"validate_config":    workflowConfiguration,
	"assemble_pipeline":  workflowAssembly,
	"validate_pipeline":  workflowAssembly,
	"deploy_pipeline":    workflowAssembly,
}

// Limits on what one session may pile up in its state.
const (
	workflowMaxPipelines = 64
	workflowMaxValidated = 256
	workflowSearchLimit  = 5
)

var workflowKinds = []string{"source", "transform", "sink"}

// errWorkflowNotSeeded is the 409 of a tool called before /seed_session, a FastAPI HTTPException
// body {"detail": …} (gym.DetailError) like the tools' other errors with their own status.
var errWorkflowNotSeeded = &gym.DetailError{Status: http.StatusConflict,
	Detail: "Session not seeded: POST /seed_session with the task row before calling the workflow tools."}

func (wf *workflow) Tool(name string) (gym.ToolFunc, bool) {
	var fn func(context.Context, string, []byte) ([]gym.Field, error)
	switch name {
	case "search_components":
		fn = wf.searchComponents
	case "list_components":
		fn = wf.listComponents
	case "get_component_info":
		fn = wf.getComponentInfo
	case "get_config_schema":
		fn = wf.getConfigSchema
	case "validate_config":
		fn = wf.validateConfig
	case "assemble_pipeline":
		fn = wf.assemblePipeline
	case "validate_pipeline":
		fn = wf.validatePipeline
	case "deploy_pipeline":
		fn = wf.deployPipeline
	default:
		return nil, false
	}
	return fn, true
}

// ---- state ----

// workflowComponent is one component of the catalogue, as the task row's "catalog" lists it.
type workflowComponent struct {
	ComponentID  string          `json:"component_id"`
	Name         string          `json:"name"`
	Kind         string          `json:"kind"`
	Description  string          `json:"description"`
	Tags         []string        `json:"tags"`
	Version      string          `json:"version"`
	Deprecated   bool            `json:"deprecated"`
	SupersededBy string          `json:"superseded_by,omitempty"`
	ConfigSchema json.RawMessage `json:"config_schema"`
}

// workflowState is a session's state.
type workflowState struct {
	Catalog []workflowComponent `json:"catalog"`
	// Validated holds the keys (workflowConfigKey) of the configurations that passed
	// validate_config.
	Validated []string           `json:"validated,omitempty"`
	Pipelines []workflowPipeline `json:"pipelines,omitempty"`
	Deployed  string             `json:"deployed,omitempty"` // the pipeline deployed last
	// The call history verify needs.
	LastStep           int  `json:"last_step,omitempty"`  // highest step called so far
	SeenSteps          int  `json:"seen_steps,omitempty"` // bit s set: step s was called
	WentBack           bool `json:"went_back,omitempty"`  // a call of an earlier step after a later one
	ValidationFailures int  `json:"validation_failures,omitempty"`
	UnvalidatedDeploys int  `json:"unvalidated_deploys,omitempty"` // deploy calls refused for want of validation
}

type workflowPipeline struct {
	ID         string          `json:"id"`
	Components []workflowStage `json:"components"`
	Validated  bool            `json:"validated"`
}

type workflowStage struct {
	ComponentID string          `json:"component_id"`
	Config      json.RawMessage `json:"config"`
}

func (st *workflowState) component(id string) *workflowComponent {
	for i := range st.Catalog {
		if st.Catalog[i].ComponentID == id {
			return &st.Catalog[i]
		}
	}
	return nil
}

func (st *workflowState) pipeline(id string) *workflowPipeline {
	for i := range st.Pipelines {
		if st.Pipelines[i].ID == id {
			return &st.Pipelines[i]
		}
	}
	return nil
}

func (st *workflowState) record(tool string) {
	s := workflowToolStep[tool]
	if s < st.LastStep {
		st.WentBack = true
	}
	st.LastStep = max(st.LastStep, s)
	st.SeenSteps |= 1 << s
}

func (st *workflowState) stepsInOrder() bool {
	all := 1<<workflowDiscovery | 1<<workflowConfiguration | 1<<workflowAssembly
	return st.SeenSteps&all == all && !st.WentBack
}

// update runs fn on the session's state and stores the result, recording the tool call. An
// unseeded session is a 409; when fn fails the state is left as it was.
func (wf *workflow) update(ctx context.Context, sid, tool string, fn func(st *workflowState) ([]gym.Field, error)) ([]gym.Field, error) {
	var out []gym.Field
	err := wf.store.Update(ctx, sid, func(old []byte, ok bool) ([]byte, error) {
		if !ok {
			return nil, errWorkflowNotSeeded
		}
		var st workflowState
		if err := json.Unmarshal(old, &st); err != nil {
			return nil, &gym.PyError{Class: "ValueError", Msg: "corrupt workflow session state: " + err.Error()}
		}
		fields, err := fn(&st)
		if err != nil {
			return nil, err
		}
		st.record(tool)
		out = fields
		return json.Marshal(&st)
	})
	return out, err
}

// ---- seed_session ----

func (wf *workflow) SeedSession(ctx context.Context, sid string, row *gym.Object) error {
	var errs gym.ValidationErrors
	loc := []any{"body", "catalog"}
	var catalog []workflowComponent
	if raw, ok := gym.Required(row, "catalog", []any{"body"}, &errs); ok {
		catalog = parseWorkflowCatalog(raw, loc, &errs)
	}
	if len(errs) > 0 {
		return errs
	}
	state, err := json.Marshal(&workflowState{Catalog: catalog})
	if err != nil {
		return err
	}
	return wf.store.Update(ctx, sid, func([]byte, bool) ([]byte, error) { return state, nil })
}

func parseWorkflowCatalog(raw json.RawMessage, loc []any, errs *gym.ValidationErrors) []workflowComponent {
	items, ok := gym.LaxList(raw, loc, errs)
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	out := make([]workflowComponent, 0, len(items))
	for i, itemRaw := range items {
		iloc := gym.At(loc, i)
		item, ok := gym.AsObject(itemRaw, iloc, errs)
		if !ok {
			continue
		}
		var c workflowComponent
		for _, k := range []struct {
			key string
			dst *string
		}{{"component_id", &c.ComponentID}, {"name", &c.Name}, {"kind", &c.Kind}} {
			if r, ok := gym.Required(item, k.key, iloc, errs); ok {
				*k.dst, _ = gym.LaxString(r, gym.At(iloc, k.key), errs)
			}
		}
		for _, k := range []struct {
			key string
			dst *string
		}{{"description", &c.Description}, {"version", &c.Version}, {"superseded_by", &c.SupersededBy}} {
			if r, ok := item.Get(k.key); ok && !gym.IsNull(r) {
				*k.dst, _ = gym.LaxString(r, gym.At(iloc, k.key), errs)
			}
		}
		if r, ok := item.Get("tags"); ok && !gym.IsNull(r) {
			c.Tags, _ = gym.LaxStringList(r, gym.At(iloc, "tags"), errs)
		}
		if r, ok := item.Get("deprecated"); ok && !gym.IsNull(r) {
			if gym.LaxBool(r, gym.At(iloc, "deprecated"), errs) {
				c.Deprecated = workflowTruthy(r)
			}
		}
		if c.Kind != "" && !workflowIsKind(c.Kind) {
			errs.Add("literal_error", gym.At(iloc, "kind"), "Input should be 'source', 'transform' or 'sink'", c.Kind)
		}
		if c.ComponentID != "" {
			if seen[c.ComponentID] {
				errs.Add("value_error", gym.At(iloc, "component_id"), "Value error, component_id "+strconv.Quote(c.ComponentID)+" is listed twice", c.ComponentID)
			}
			seen[c.ComponentID] = true
		}
		if r, ok := gym.Required(item, "config_schema", iloc, errs); ok {
			if _, err := parseWorkflowSchema(r); err != nil {
				errs.Add("value_error", gym.At(iloc, "config_schema"), "Value error, "+err.Error(), r)
			} else {
				c.ConfigSchema = workflowCompact(r)
			}
		}
		if c.Tags == nil {
			c.Tags = []string{}
		}
		out = append(out, c)
	}
	return out
}

func workflowIsKind(k string) bool {
	for _, w := range workflowKinds {
		if k == w {
			return true
		}
	}
	return false
}

// workflowTruthy is the value of a JSON value that LaxBool accepted.
func workflowTruthy(raw json.RawMessage) bool {
	var v any
	_ = json.Unmarshal(raw, &v)
	switch x := v.(type) {
	case bool:
		return x
	case float64:
		return x != 0
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "1", "on", "t", "true", "y", "yes":
			return true
		}
	}
	return false
}

func workflowCompact(raw json.RawMessage) json.RawMessage {
	return json.RawMessage(gym.MarshalValue(raw))
}

// ---- configuration schemas ----

// workflowSchema is the subset of JSON Schema the catalogue's configuration schemas use: an
// object of properties with type (string, integer, number, boolean, array), enum, minimum,
// maximum, pattern, default, items and minItems, and a list of required properties. Unknown
// properties are refused.
type workflowSchema struct {
	Properties []workflowProperty // in the schema's order
	Required   []string
}

type workflowProperty struct {
	Name     string            `json:"-"`
	Type     string            `json:"type"`
	Enum     []any             `json:"enum"`
	Minimum  *float64          `json:"minimum"`
	Maximum  *float64          `json:"maximum"`
	Pattern  string            `json:"pattern"`
	Default  json.RawMessage   `json:"default"`
	Items    *workflowProperty `json:"items"`
	MinItems *int              `json:"minItems"`
}

func (s *workflowSchema) property(name string) *workflowProperty {
	for i := range s.Properties {
		if s.Properties[i].Name == name {
			return &s.Properties[i]
		}
	}
	return nil
}

func (s *workflowSchema) isRequired(name string) bool {
	for _, r := range s.Required {
		if r == name {
			return true
		}
	}
	return false
}

func parseWorkflowSchema(raw json.RawMessage) (*workflowSchema, error) {
	var top struct {
		Type       string          `json:"type"`
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("config_schema: %v", err)
	}
	if top.Type != "object" {
		return nil, fmt.Errorf("config_schema: type must be \"object\"")
	}
	s := &workflowSchema{Required: top.Required}
	if len(top.Properties) > 0 && !gym.IsNull(top.Properties) {
		props, ok, err := gym.DecodeObject(top.Properties)
		if err != nil || !ok {
			return nil, fmt.Errorf("config_schema.properties: want an object")
		}
		for _, m := range props.Members {
			p, err := parseWorkflowProperty(m.Value)
			if err != nil {
				return nil, fmt.Errorf("config_schema.properties.%s: %v", m.Key, err)
			}
			p.Name = m.Key
			s.Properties = append(s.Properties, *p)
		}
	}
	for _, r := range s.Required {
		if s.property(r) == nil {
			return nil, fmt.Errorf("config_schema.required: %q is not a property", r)
		}
	}
	return s, nil
}

func parseWorkflowProperty(raw json.RawMessage) (*workflowProperty, error) {
	var p workflowProperty
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		return nil, err
	}
	switch p.Type {
	case "string", "integer", "number", "boolean":
	case "array":
		if p.Items == nil {
			return nil, fmt.Errorf("an array property needs items")
		}
		if p.Items.Type == "array" || p.Items.Type == "" {
			return nil, fmt.Errorf("items: unsupported type %q", p.Items.Type)
		}
	default:
		return nil, fmt.Errorf("unsupported type %q", p.Type)
	}
	if p.Pattern != "" {
		if _, err := regexp.Compile(p.Pattern); err != nil {
			return nil, fmt.Errorf("pattern: %v", err)
		}
	}
	return &p, nil
}

// workflowError is one structured validation error.
type workflowError struct {
	Property string `json:"property"`
	Message  string `json:"message"`
}

// validateWorkflowConfig checks config against the schema; errors name the property (prefix
// is prepended, e.g. "components[1].config."). It returns the errors in a stable order:
// unknown properties in the config's order, then the schema's properties in its order.
func validateWorkflowConfig(c *workflowComponent, config *gym.Object, prefix string) []workflowError {
	errs := []workflowError{}
	s, err := parseWorkflowSchema(c.ConfigSchema)
	if err != nil {
		return append(errs, workflowError{strings.TrimSuffix(prefix, "."), "the component's schema is broken: " + err.Error()})
	}
	var names []string
	for _, p := range s.Properties {
		names = append(names, p.Name)
	}
	for _, m := range config.Members {
		if s.property(m.Key) == nil {
			errs = append(errs, workflowError{prefix + m.Key, fmt.Sprintf("%q is not a property of %s; its properties are: %s", m.Key, c.Name, strings.Join(names, ", "))})
		}
	}
	for _, p := range s.Properties {
		raw, ok := config.Get(p.Name)
		if !ok {
			if s.isRequired(p.Name) {
				errs = append(errs, workflowError{prefix + p.Name, fmt.Sprintf("required property %q is missing", p.Name)})
			}
			continue
		}
		v, err := gym.DecodePython(raw)
		if err != nil {
			errs = append(errs, workflowError{prefix + p.Name, "not valid JSON"})
			continue
		}
		checkWorkflowValue(&p, v, prefix+p.Name, &errs)
	}
	return errs
}

func checkWorkflowValue(p *workflowProperty, v any, path string, errs *[]workflowError) {
	bad := func(format string, args ...any) {
		*errs = append(*errs, workflowError{path, fmt.Sprintf(format, args...)})
	}
	switch p.Type {
	case "string":
		s, ok := v.(string)
		if !ok {
			bad("must be a string, got %s", workflowTypeName(v))
			return
		}
		if p.Pattern != "" {
			if re, err := regexp.Compile(p.Pattern); err == nil && !re.MatchString(s) {
				bad("%q does not match the pattern %s", s, p.Pattern)
				return
			}
		}
	case "integer", "number":
		n, ok := v.(json.Number)
		if !ok {
			bad("must be %s, got %s", map[string]string{"integer": "an integer", "number": "a number"}[p.Type], workflowTypeName(v))
			return
		}
		f, err := n.Float64()
		if err != nil || math.IsInf(f, 0) {
			bad("must be a finite number")
			return
		}
		if p.Type == "integer" && f != math.Trunc(f) {
			bad("must be an integer, got %s", n)
			return
		}
		if p.Minimum != nil && f < *p.Minimum {
			bad("must be at least %s, got %s", workflowNum(*p.Minimum), n)
			return
		}
		if p.Maximum != nil && f > *p.Maximum {
			bad("must be at most %s, got %s", workflowNum(*p.Maximum), n)
			return
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			bad("must be a boolean, got %s", workflowTypeName(v))
			return
		}
	case "array":
		list, ok := v.([]any)
		if !ok {
			bad("must be a list, got %s", workflowTypeName(v))
			return
		}
		if p.MinItems != nil && len(list) < *p.MinItems {
			bad("must have at least %d item(s), got %d", *p.MinItems, len(list))
			return
		}
		n := len(*errs)
		for i, item := range list {
			checkWorkflowValue(p.Items, item, fmt.Sprintf("%s[%d]", path, i), errs)
		}
		if len(*errs) > n {
			return
		}
	}
	if len(p.Enum) > 0 {
		key := workflowCanonical(v, false)
		allowed := make([]string, len(p.Enum))
		for i, e := range p.Enum {
			allowed[i] = workflowCanonical(e, false)
			if allowed[i] == key {
				return
			}
		}
		bad("must be one of %s, got %s", strings.Join(allowed, ", "), key)
	}
}

func workflowNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// workflowTypeName is a decoded JSON value's type in JSON's words.
func workflowTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return "a value"
}

// normalizeWorkflowConfig is a valid config with the schema's defaults filled in, its
// properties in the schema's order.
func normalizeWorkflowConfig(c *workflowComponent, config *gym.Object) json.RawMessage {
	s, err := parseWorkflowSchema(c.ConfigSchema)
	if err != nil {
		return gym.ObjectInput(config)
	}
	fields := []gym.Field{}
	for _, p := range s.Properties {
		if raw, ok := config.Get(p.Name); ok {
			fields = append(fields, gym.Field{Key: p.Name, Value: raw})
		} else if len(p.Default) > 0 {
			fields = append(fields, gym.Field{Key: p.Name, Value: p.Default})
		}
	}
	return gym.MarshalFields(fields)
}

// workflowCanonical writes a decoded JSON value canonically: object keys sorted, numbers by
// value; with sortLists, the items of lists sorted too (a list compared as a multiset).
func workflowCanonical(v any, sortLists bool) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return strconv.FormatInt(i, 10)
		}
		if f, err := x.Float64(); err == nil {
			if f == math.Trunc(f) && math.Abs(f) < 1e15 {
				return strconv.FormatInt(int64(f), 10)
			}
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
		return string(x)
	case float64:
		return workflowCanonical(json.Number(strconv.FormatFloat(x, 'g', -1, 64)), sortLists)
	case string:
		return string(gym.MarshalValue(x))
	case []any:
		items := make([]string, len(x))
		for i, e := range x {
			items[i] = workflowCanonical(e, sortLists)
		}
		if sortLists {
			sort.Strings(items)
		}
		return "[" + strings.Join(items, ",") + "]"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = string(gym.MarshalValue(k)) + ":" + workflowCanonical(x[k], sortLists)
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	return fmt.Sprint(v)
}

func workflowCanonicalRaw(raw json.RawMessage, sortLists bool) string {
	v, err := gym.DecodePython(raw)
	if err != nil {
		return string(raw)
	}
	return workflowCanonical(v, sortLists)
}

// workflowConfigKey identifies a component's configuration that passed validate_config.
func workflowConfigKey(componentID string, normalized json.RawMessage) string {
	return componentID + "\x00" + workflowCanonicalRaw(normalized, false)
}

// ---- argument helpers ----

// workflowDict validates raw as pydantic's Dict[str, Any].
func workflowDict(raw json.RawMessage, loc []any, errs *gym.ValidationErrors) (*gym.Object, bool) {
	if gym.JSONKind(raw) == '{' {
		if obj, ok, err := gym.DecodeObject([]byte(strings.TrimSpace(string(raw)))); err == nil && ok {
			return obj, true
		}
	}
	errs.Add("dict_type", loc, "Input should be a valid dictionary", raw)
	return nil, false
}

// ---- discovery ----

type workflowEntry struct {
	ComponentID string `json:"component_id"`
	Name        string `json:"name"`
	Kind        string `json:"kind"`
	Deprecated  bool   `json:"deprecated"`
	Summary     string `json:"summary"`
}

func workflowEntryOf(c *workflowComponent) workflowEntry {
	return workflowEntry{ComponentID: c.ComponentID, Name: c.Name, Kind: c.Kind, Deprecated: c.Deprecated, Summary: c.Description}
}

func workflowTokens(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

func (wf *workflow) searchComponents(ctx context.Context, sid string, body []byte) ([]gym.Field, error) {
	query, err := gym.Arg(body, "query", gym.LaxString)
	if err != nil {
		return nil, err
	}
	return wf.update(ctx, sid, "search_components", func(st *workflowState) ([]gym.Field, error) {
		tokens := workflowTokens(query)
		type hit struct {
			score int
			c     *workflowComponent
		}
		var hits []hit
		for i := range st.Catalog {
			c := &st.Catalog[i]
			text := strings.ToLower(strings.Join(append([]string{c.Name, c.Kind, c.Description}, c.Tags...), " "))
			score := 0
			for _, t := range tokens {
				if strings.Contains(text, t) {
					score++
				}
			}
			if strings.EqualFold(strings.TrimSpace(query), c.Name) {
				score += 100
			}
			if score > 0 {
				hits = append(hits, hit{score, c})
			}
		}
		sort.SliceStable(hits, func(i, j int) bool { return hits[i].score > hits[j].score })
		total := len(hits)
		if len(hits) > workflowSearchLimit {
			hits = hits[:workflowSearchLimit]
		}
		results := make([]workflowEntry, len(hits))
		for i, h := range hits {
			results[i] = workflowEntryOf(h.c)
		}
		return []gym.Field{{Key: "query", Value: query}, {Key: "results", Value: results}, {Key: "total_matches", Value: total}}, nil
	})
}

func (wf *workflow) listComponents(ctx context.Context, sid string, body []byte) ([]gym.Field, error) {
	var kind *string
	if _, err := gym.Args(body, func(args *gym.Object, errs *gym.ValidationErrors) {
		raw, ok := args.Get("kind")
		if !ok || gym.IsNull(raw) {
			return
		}
		s, ok := gym.LaxString(raw, []any{"body", "kind"}, errs)
		if !ok {
			return
		}
		if !workflowIsKind(s) {
			*errs = append(*errs, gym.FieldError{Type: "literal_error", Loc: []any{"body", "kind"},
				Msg: "Input should be 'source', 'transform' or 'sink'", Input: raw,
				Ctx: map[string]any{"expected": "'source', 'transform' or 'sink'"}})
			return
		}
		kind = &s
	}); err != nil {
		return nil, err
	}
	return wf.update(ctx, sid, "list_components", func(st *workflowState) ([]gym.Field, error) {
		list := []workflowEntry{}
		for i := range st.Catalog {
			if kind == nil || st.Catalog[i].Kind == *kind {
				list = append(list, workflowEntryOf(&st.Catalog[i]))
			}
		}
		return []gym.Field{{Key: "kind", Value: kind}, {Key: "components", Value: list}}, nil
	})
}

func workflowUnknownComponent(id string) error {
	return &gym.DetailError{Status: http.StatusNotFound, Detail: fmt.Sprintf("Component %q not found in the catalogue; use search_components or list_components to find component ids.", id)}
}

func (wf *workflow) getComponentInfo(ctx context.Context, sid string, body []byte) ([]gym.Field, error) {
	id, err := gym.Arg(body, "component_id", gym.LaxString)
	if err != nil {
		return nil, err
	}
	return wf.update(ctx, sid, "get_component_info", func(st *workflowState) ([]gym.Field, error) {
		c := st.component(id)
		if c == nil {
			return nil, workflowUnknownComponent(id)
		}
		var superseded any
		if c.SupersededBy != "" {
			superseded = c.SupersededBy
		}
		needsCredential, needsPool := false, false
		if s, err := parseWorkflowSchema(c.ConfigSchema); err == nil {
			needsCredential, needsPool = s.property("credential") != nil, s.property("worker_pool") != nil
		}
		return []gym.Field{
			{Key: "component_id", Value: c.ComponentID},
			{Key: "name", Value: c.Name},
			{Key: "kind", Value: c.Kind},
			{Key: "description", Value: c.Description},
			{Key: "tags", Value: c.Tags},
			{Key: "version", Value: c.Version},
			{Key: "deprecated", Value: c.Deprecated},
			{Key: "superseded_by", Value: superseded},
			{Key: "requires_credential", Value: needsCredential},
			{Key: "requires_worker_pool", Value: needsPool},
		}, nil
	})
}

// ---- configuration ----

func (wf *workflow) getConfigSchema(ctx context.Context, sid string, body []byte) ([]gym.Field, error) {
	id, err := gym.Arg(body, "component_id", gym.LaxString)
	if err != nil {
		return nil, err
	}
	return wf.update(ctx, sid, "get_config_schema", func(st *workflowState) ([]gym.Field, error) {
		c := st.component(id)
		if c == nil {
			return nil, workflowUnknownComponent(id)
		}
		return []gym.Field{{Key: "component_id", Value: c.ComponentID}, {Key: "name", Value: c.Name}, {Key: "config_schema", Value: c.ConfigSchema}}, nil
	})
}

func (wf *workflow) validateConfig(ctx context.Context, sid string, body []byte) ([]gym.Field, error) {
	var id string
	var config *gym.Object
	if _, err := gym.Args(body, func(args *gym.Object, errs *gym.ValidationErrors) {
		id = gym.RequiredAs(args, "component_id", []any{"body"}, errs, gym.LaxString)
		if raw, ok := gym.Required(args, "config", []any{"body"}, errs); ok {
			config, _ = workflowDict(raw, []any{"body", "config"}, errs)
		}
	}); err != nil {
		return nil, err
	}
	return wf.update(ctx, sid, "validate_config", func(st *workflowState) ([]gym.Field, error) {
		errs := []workflowError{}
		warnings := []workflowError{}
		var normalized any
		c := st.component(id)
		if c == nil {
			errs = append(errs, workflowError{"component_id", fmt.Sprintf("unknown component %q; use search_components or list_components to find component ids", id)})
		} else {
			errs = validateWorkflowConfig(c, config, "")
			if c.Deprecated {
				warnings = append(warnings, workflowError{"component_id", workflowDeprecatedMessage(c)})
			}
		}
		valid := len(errs) == 0
		if valid {
			n := normalizeWorkflowConfig(c, config)
			normalized = n
			key := workflowConfigKey(c.ComponentID, n)
			if !workflowContains(st.Validated, key) {
				if len(st.Validated) >= workflowMaxValidated {
					return nil, &gym.DetailError{Status: http.StatusConflict, Detail: "Too many validated configurations in this session."}
				}
				st.Validated = append(st.Validated, key)
			}
		} else {
			st.ValidationFailures++
		}
		return []gym.Field{
			{Key: "component_id", Value: id},
			{Key: "valid", Value: valid},
			{Key: "errors", Value: errs},
			{Key: "warnings", Value: warnings},
			{Key: "normalized_config", Value: normalized},
		}, nil
	})
}

func workflowContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func workflowDeprecatedMessage(c *workflowComponent) string {
	msg := c.Name + " is deprecated and cannot be deployed"
	if c.SupersededBy != "" {
		msg += "; use " + c.SupersededBy + " instead"
	}
	return msg
}

// ---- assembly ----

func (wf *workflow) assemblePipeline(ctx context.Context, sid string, body []byte) ([]gym.Field, error) {
	var stages []workflowStage
	if _, err := gym.Args(body, func(args *gym.Object, errs *gym.ValidationErrors) {
		raw, ok := gym.Required(args, "components", []any{"body"}, errs)
		if !ok {
			return
		}
		loc := []any{"body", "components"}
		items, ok := gym.LaxList(raw, loc, errs)
		if !ok {
			return
		}
		if len(items) == 0 {
			*errs = append(*errs, gym.FieldError{Type: "too_short", Loc: loc,
				Msg: "List should have at least 1 item after validation, not 0", Input: raw,
				Ctx: map[string]any{"field_type": "List", "min_length": 1, "actual_length": 0}})
			return
		}
		for i, itemRaw := range items {
			iloc := gym.At(loc, i)
			item, ok := gym.AsObject(itemRaw, iloc, errs)
			if !ok {
				continue
			}
			var st workflowStage
			if r, ok := gym.Required(item, "component_id", iloc, errs); ok {
				st.ComponentID, _ = gym.LaxString(r, gym.At(iloc, "component_id"), errs)
			}
			if r, ok := gym.Required(item, "config", iloc, errs); ok {
				if obj, ok := workflowDict(r, gym.At(iloc, "config"), errs); ok {
					st.Config = gym.ObjectInput(obj)
				}
			}
			stages = append(stages, st)
		}
	}); err != nil {
		return nil, err
	}
	return wf.update(ctx, sid, "assemble_pipeline", func(st *workflowState) ([]gym.Field, error) {
		if len(st.Pipelines) >= workflowMaxPipelines {
			return nil, &gym.DetailError{Status: http.StatusConflict, Detail: "Too many pipelines in this session."}
		}
		p := workflowPipeline{ID: fmt.Sprintf("pl-%03d", len(st.Pipelines)+1), Components: stages}
		st.Pipelines = append(st.Pipelines, p)
		type summary struct {
			Position    int     `json:"position"`
			ComponentID string  `json:"component_id"`
			Name        *string `json:"name"`
			Kind        *string `json:"kind"`
		}
		list := make([]summary, len(stages))
		for i, s := range stages {
			list[i] = summary{Position: i, ComponentID: s.ComponentID}
			if c := st.component(s.ComponentID); c != nil {
				list[i].Name, list[i].Kind = &c.Name, &c.Kind
			}
		}
		return []gym.Field{
			{Key: "pipeline_id", Value: p.ID},
			{Key: "status", Value: "assembled"},
			{Key: "components", Value: list},
			{Key: "next", Value: "call validate_pipeline with this pipeline_id, then deploy_pipeline"},
		}, nil
	})
}

// checkWorkflowPipeline is validate_pipeline's verdict on p.
func checkWorkflowPipeline(st *workflowState, p *workflowPipeline) []workflowError {
	errs := []workflowError{}
	n := len(p.Components)
	if n < 2 {
		errs = append(errs, workflowError{"components", "a pipeline needs at least a source and a sink"})
	}
	for i, s := range p.Components {
		where := fmt.Sprintf("components[%d]", i)
		c := st.component(s.ComponentID)
		if c == nil {
			errs = append(errs, workflowError{where + ".component_id", fmt.Sprintf("unknown component %q", s.ComponentID)})
			continue
		}
		if c.Deprecated {
			errs = append(errs, workflowError{where + ".component_id", workflowDeprecatedMessage(c)})
		}
		switch {
		case i == 0 && c.Kind != "source":
			errs = append(errs, workflowError{where, fmt.Sprintf("a pipeline starts with a source; %s is a %s", c.Name, c.Kind)})
		case i == n-1 && n > 1 && c.Kind != "sink":
			errs = append(errs, workflowError{where, fmt.Sprintf("a pipeline ends with a sink; %s is a %s", c.Name, c.Kind)})
		case i > 0 && i < n-1 && c.Kind != "transform":
			errs = append(errs, workflowError{where, fmt.Sprintf("only transforms go between the source and the sink; %s is a %s", c.Name, c.Kind)})
		}
		config, _, _ := gym.DecodeObject(s.Config)
		cerrs := validateWorkflowConfig(c, config, where+".config.")
		errs = append(errs, cerrs...)
		if len(cerrs) == 0 && !workflowContains(st.Validated, workflowConfigKey(c.ComponentID, normalizeWorkflowConfig(c, config))) {
			errs = append(errs, workflowError{where + ".config", fmt.Sprintf("this configuration of %s has not passed validate_config; validate it first", c.Name)})
		}
	}
	return errs
}

func workflowNoPipeline(id string) workflowError {
	return workflowError{"pipeline_id", fmt.Sprintf("no pipeline %q in this session; assemble_pipeline returns the pipeline_id", id)}
}

func (wf *workflow) validatePipeline(ctx context.Context, sid string, body []byte) ([]gym.Field, error) {
	id, err := gym.Arg(body, "pipeline_id", gym.LaxString)
	if err != nil {
		return nil, err
	}
	return wf.update(ctx, sid, "validate_pipeline", func(st *workflowState) ([]gym.Field, error) {
		var errs []workflowError
		p := st.pipeline(id)
		if p == nil {
			errs = []workflowError{workflowNoPipeline(id)}
		} else {
			errs = checkWorkflowPipeline(st, p)
		}
		valid := len(errs) == 0
		if valid {
			p.Validated = true
		} else {
			st.ValidationFailures++
		}
		return []gym.Field{{Key: "pipeline_id", Value: id}, {Key: "valid", Value: valid}, {Key: "errors", Value: errs}}, nil
	})
}

func (wf *workflow) deployPipeline(ctx context.Context, sid string, body []byte) ([]gym.Field, error) {
	id, err := gym.Arg(body, "pipeline_id", gym.LaxString)
	if err != nil {
		return nil, err
	}
	return wf.update(ctx, sid, "deploy_pipeline", func(st *workflowState) ([]gym.Field, error) {
		errs := []workflowError{}
		p := st.pipeline(id)
		switch {
		case p == nil:
			errs = append(errs, workflowNoPipeline(id))
		case !p.Validated:
			errs = append(errs, workflowError{"pipeline_id", fmt.Sprintf("pipeline %s has not passed validate_pipeline; validate it (and fix what it reports) before deploying", id)})
		}
		if len(errs) > 0 {
			st.UnvalidatedDeploys++
			return []gym.Field{{Key: "pipeline_id", Value: id}, {Key: "deployed", Value: false}, {Key: "deployment_id", Value: nil}, {Key: "status", Value: "refused"}, {Key: "errors", Value: errs}}, nil
		}
		st.Deployed = id
		return []gym.Field{{Key: "pipeline_id", Value: id}, {Key: "deployed", Value: true}, {Key: "deployment_id", Value: "dep-" + strings.TrimPrefix(id, "pl-")}, {Key: "status", Value: "running"}, {Key: "errors", Value: errs}}, nil
	})
}

// ---- verify ----

type workflowRequirement struct {
	ComponentID string
	Config      *gym.Object
}

func parseWorkflowRequirements(req *gym.Object, errs *gym.ValidationErrors) []workflowRequirement {
	raw, ok := gym.Required(req, "requirements", []any{"body"}, errs)
	if !ok {
		return nil
	}
	loc := []any{"body", "requirements"}
	obj, ok := gym.AsObject(raw, loc, errs)
	if !ok {
		return nil
	}
	raw, ok = gym.Required(obj, "components", loc, errs)
	if !ok {
		return nil
	}
	loc = gym.At(loc, "components")
	items, ok := gym.LaxList(raw, loc, errs)
	if !ok {
		return nil
	}
	out := make([]workflowRequirement, 0, len(items))
	for i, itemRaw := range items {
		iloc := gym.At(loc, i)
		item, ok := gym.AsObject(itemRaw, iloc, errs)
		if !ok {
			continue
		}
		var r workflowRequirement
		if v, ok := gym.Required(item, "component_id", iloc, errs); ok {
			r.ComponentID, _ = gym.LaxString(v, gym.At(iloc, "component_id"), errs)
		}
		r.Config = &gym.Object{}
		if v, ok := item.Get("config"); ok && !gym.IsNull(v) {
			if c, ok := workflowDict(v, gym.At(iloc, "config"), errs); ok {
				r.Config = c
			}
		}
		out = append(out, r)
	}
	return out
}

func (wf *workflow) Verify(_ context.Context, st gym.SessionState, req *gym.Object, _ []gym.OutputItem, errs *gym.ValidationErrors) ([]gym.Field, error) {
	want := parseWorkflowRequirements(req, errs)
	if len(*errs) > 0 {
		return nil, nil
	}
	raw, ok := st.Data, st.Found
	v := workflowVerdict{reason: "session_not_found"}
	if ok {
		var st workflowState
		if err := json.Unmarshal(raw, &st); err != nil {
			return nil, &gym.PyError{Class: "ValueError", Msg: "corrupt workflow session state: " + err.Error()}
		}
		v = scoreWorkflow(&st, want)
	}
	reward := 0.0
	if v.reason == "ok" {
		reward = 1.0
	}
	var pipelineID any
	if v.pipelineID != "" {
		pipelineID = v.pipelineID
	}
	return []gym.Field{
		{Key: "reward", Value: gym.PyFloat(reward)},
		{Key: "reason", Value: v.reason},
		{Key: "pipeline_id", Value: pipelineID},
		{Key: "deployed", Value: v.deployed},
		{Key: "components_correct", Value: gym.PyFloat(v.componentsCorrect)},
		{Key: "config_valid", Value: v.configValid},
		{Key: "config_matches", Value: v.configMatches},
		{Key: "validated_before_deploy", Value: v.validatedBeforeDeploy},
		{Key: "validation_failures", Value: v.validationFailures},
		{Key: "steps_in_order", Value: v.stepsInOrder},
	}, nil
}

type workflowVerdict struct {
	reason                string
	pipelineID            string
	deployed              bool
	componentsCorrect     float64
	configValid           bool
	configMatches         bool
	validatedBeforeDeploy bool
	validationFailures    int
	stepsInOrder          bool
}

func scoreWorkflow(st *workflowState, want []workflowRequirement) workflowVerdict {
	v := workflowVerdict{
		validationFailures: st.ValidationFailures,
		stepsInOrder:       st.stepsInOrder(),
	}
	p := st.pipeline(st.Deployed)
	if p == nil {
		v.reason = "not_deployed: no pipeline was deployed in this session"
		return v
	}
	v.pipelineID, v.deployed = p.ID, true
	v.validatedBeforeDeploy = st.UnvalidatedDeploys == 0

	got := p.Components
	matched := 0
	for i := range min(len(got), len(want)) {
		if got[i].ComponentID == want[i].ComponentID {
			matched++
		}
	}
	if d := max(len(got), len(want)); d > 0 {
		v.componentsCorrect = float64(matched) / float64(d)
	}

	v.configValid = true
	var invalid string
	for i, s := range got {
		c := st.component(s.ComponentID)
		config, _, _ := gym.DecodeObject(s.Config)
		if c == nil || config == nil {
			v.configValid = false
			continue
		}
		if errs := validateWorkflowConfig(c, config, fmt.Sprintf("components[%d].config.", i)); len(errs) > 0 {
			v.configValid = false
			if invalid == "" {
				invalid = errs[0].Property + ": " + errs[0].Message
			}
		}
	}

	mismatch := ""
	if v.componentsCorrect == 1 {
		for i, r := range want {
			// the configuration as deployed, with the schema's defaults filled in
			config, _, _ := gym.DecodeObject(got[i].Config)
			if c := st.component(got[i].ComponentID); c != nil && config != nil {
				config, _, _ = gym.DecodeObject(normalizeWorkflowConfig(c, config))
			}
			if config == nil {
				mismatch = fmt.Sprintf("components[%d].config is missing", i)
				break
			}
			for _, m := range r.Config.Members {
				where := fmt.Sprintf("components[%d].config.%s", i, m.Key)
				wantRaw := m.Value
				gotRaw, ok := config.Get(m.Key)
				if !ok {
					mismatch = where + " is not set, want " + workflowCanonicalRaw(wantRaw, false)
					break
				}
				if workflowCanonicalRaw(gotRaw, true) != workflowCanonicalRaw(wantRaw, true) {
					mismatch = where + " is " + workflowCanonicalRaw(gotRaw, false) + ", want " + workflowCanonicalRaw(wantRaw, false)
					break
				}
			}
			if mismatch != "" {
				break
			}
		}
		v.configMatches = mismatch == ""
	}

	switch {
	case v.componentsCorrect < 1:
		ids := func(n int, id func(int) string) string {
			parts := make([]string, n)
			for i := range parts {
				parts[i] = id(i)
			}
			return "[" + strings.Join(parts, ", ") + "]"
		}
		v.reason = "wrong_components: deployed " + ids(len(got), func(i int) string { return got[i].ComponentID }) +
			", want " + ids(len(want), func(i int) string { return want[i].ComponentID })
	case !v.configValid:
		v.reason = "invalid_config: " + invalid
	case !v.configMatches:
		v.reason = "config_mismatch: " + mismatch
	default:
		v.reason = "ok"
	}
	return v
}
