package workflow

import (
	"github.com/rollout-dev/rollout/pkg/servers/gym"
	"github.com/rollout-dev/rollout/pkg/servers/gym/gymtest"
	"github.com/rollout-dev/rollout/pkg/servers/store"

	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/plan"
)

// Set WORKFLOW_UPDATE=1 to rewrite data/workflow.jsonl and data/workflow.steps.json.
var (
	workflowDataFile  = filepath.Join("..", "..", "..", "data", "workflow.jsonl")
	workflowStepsFile = filepath.Join("..", "..", "..", "data", "workflow.steps.json")
)

func workflowRows(t *testing.T, seed int64, n int) [][]byte {
	t.Helper()
	var b bytes.Buffer
	if err := Generate(&b, seed, n); err != nil {
		t.Fatal(err)
	}
	var rows [][]byte
	for _, line := range bytes.Split(bytes.TrimSuffix(b.Bytes(), []byte("\n")), []byte("\n")) {
		if len(line) > 0 {
			rows = append(rows, line)
		}
	}
	return rows
}

func workflowField(t *testing.T, row []byte, key string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(row, &m); err != nil {
		t.Fatal(err)
	}
	return m[key]
}

func workflowPlanOf(t *testing.T, row []byte) *plan.Plan {
	t.Helper()
	p, err := plan.Parse(workflowField(t, row, plan.Field))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func workflowJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// workflowPlay plays row's reference plan in session s (already seeded), leaving out the calls
// in skip (their outputs are unknown, so references to them resolve to null), and returns the
// response object for /verify and each call's HTTP status (0 when skipped).
func workflowPlay(t *testing.T, s *gymtest.Session, row []byte, skip map[int]bool) (json.RawMessage, []int) {
	t.Helper()
	p := workflowPlanOf(t, row)
	outputs := map[int]any{}
	lookup := func(i int) (any, bool) { v, ok := outputs[i]; return v, ok }
	var items []any
	var statuses []int
	for i, c := range p.Calls() {
		if skip[i] {
			statuses = append(statuses, 0)
			continue
		}
		args, _, err := plan.Resolve(c.Arguments, lookup)
		if err != nil {
			t.Fatal(err)
		}
		code, out := s.Post("/"+c.Name, args)
		statuses = append(statuses, code)
		outputs[i] = plan.DecodeOutput(string(out))
		id := fmt.Sprintf("call_%d", i)
		items = append(items,
			map[string]any{"type": "function_call", "call_id": id, "name": c.Name, "arguments": string(args)},
			map[string]any{"type": "function_call_output", "call_id": id, "output": string(out)})
	}
	text, _, err := p.FinalText(lookup)
	if err != nil {
		t.Fatal(err)
	}
	items = append(items, map[string]any{"type": "message", "role": "assistant", "status": "completed",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}})
	return workflowJSON(t, map[string]any{
		"id": "resp_workflow", "created_at": 1700000000, "model": "reference-plan", "object": "response",
		"output": items, "parallel_tool_calls": false, "tool_choice": "auto", "tools": []any{},
	}), statuses
}

func seedWorkflow(t *testing.T, s *gymtest.Session, row []byte) {
	t.Helper()
	if out := s.MustPost("/seed_session", row); string(out) != "{}" {
		t.Fatalf("seed_session answered %s", out)
	}
}

func TestWorkflowGenerate(t *testing.T) {
	var a, b, c bytes.Buffer
	if err := Generate(&a, 7, 30); err != nil {
		t.Fatal(err)
	}
	if err := Generate(&b, 7, 30); err != nil {
		t.Fatal(err)
	}
	if err := Generate(&c, 8, 30); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("GenerateWorkflow is not deterministic for a seed")
	}
	if bytes.Equal(a.Bytes(), c.Bytes()) {
		t.Fatal("seeds 7 and 8 gave the same tasks")
	}
	var empty bytes.Buffer
	if err := Generate(&empty, 1, 0); err != nil || empty.Len() != 0 {
		t.Fatalf("n = 0: %q, %v", empty.String(), err)
	}

	rows := workflowRows(t, 1, 60)
	if len(rows) != 60 {
		t.Fatalf("%d rows, want 60", len(rows))
	}
	mem := store.NewMemory(store.Options{})
	defer mem.Close()
	h := Builtin.New(Builtin.Name, mem)
	var toolNames []string
	for _, tool := range workflowTools {
		toolNames = append(toolNames, tool.name)
		if _, ok := h.Tool(tool.name); !ok {
			t.Errorf("the rows offer %s, which the server does not serve", tool.name)
		}
	}
	texts := map[string]bool{}
	difficulties := map[string]int{}
	categories := map[string]int{}
	for i, row := range rows {
		var r struct {
			ID         string `json:"id"`
			Category   string `json:"category"`
			Difficulty string `json:"difficulty"`
			Params     struct {
				Input []struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"input"`
				Tools []struct {
					Type       string          `json:"type"`
					Name       string          `json:"name"`
					Parameters json.RawMessage `json:"parameters"`
					Strict     *bool           `json:"strict"`
				} `json:"tools"`
			} `json:"responses_create_params"`
			Catalog      []workflowComponent `json:"catalog"`
			Requirements struct {
				Components []struct {
					ComponentID string `json:"component_id"`
				} `json:"components"`
			} `json:"requirements"`
		}
		if err := json.Unmarshal(row, &r); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("workflow-%04d", i+1); r.ID != want {
			t.Errorf("row %d: id %q, want %q", i, r.ID, want)
		}
		difficulties[r.Difficulty]++
		categories[r.Category]++
		if len(r.Params.Input) != 1 || r.Params.Input[0].Role != "user" || r.Params.Input[0].Content == "" {
			t.Errorf("%s: input %+v, want one user message", r.ID, r.Params.Input)
		} else if text := r.Params.Input[0].Content; texts[text] {
			t.Errorf("%s: request %q is not unique", r.ID, text)
		} else {
			texts[text] = true
		}
		var names []string
		for _, tool := range r.Params.Tools {
			names = append(names, tool.Name)
			if tool.Type != "function" || tool.Strict == nil || *tool.Strict || !json.Valid(tool.Parameters) {
				t.Errorf("%s: tool %s is not a flat function tool with strict false", r.ID, tool.Name)
			}
		}
		if !slices.Equal(names, toolNames) {
			t.Errorf("%s: tools %v, want %v", r.ID, names, toolNames)
		}
		for _, req := range r.Requirements.Components {
			found := false
			for _, c := range r.Catalog {
				found = found || (c.ComponentID == req.ComponentID && !c.Deprecated)
			}
			if !found {
				t.Errorf("%s: required component %s is not a supported catalogue component", r.ID, req.ComponentID)
			}
		}
		p := workflowPlanOf(t, row)
		for _, c := range p.Calls() {
			if !slices.Contains(toolNames, c.Name) {
				t.Errorf("%s: the plan calls %s, which the row does not offer", r.ID, c.Name)
			}
		}
	}
	for _, d := range workflowDifficulties {
		if difficulties[d] != 20 {
			t.Errorf("difficulties %v, want 20 of each", difficulties)
		}
	}
	if len(categories) < 4 {
		t.Errorf("categories %v: too few", categories)
	}
}

func TestWorkflowDataFiles(t *testing.T) {
	var want bytes.Buffer
	if err := Generate(&want, 1, 60); err != nil {
		t.Fatal(err)
	}
	var steps bytes.Buffer
	if err := WriteSteps(&steps); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("WORKFLOW_UPDATE") != "" {
		if err := os.WriteFile(workflowDataFile, want.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(workflowStepsFile, steps.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(workflowDataFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("%s is not GenerateWorkflow(seed 1, n 60); regenerate with WORKFLOW_UPDATE=1 go test -run TestWorkflowDataFiles ./pkg/servers", workflowDataFile)
	}
	if len(got) >= 1<<20 {
		t.Errorf("%s is %d bytes, want < 1 MB", workflowDataFile, len(got))
	}
	gotSteps, err := os.ReadFile(workflowStepsFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gotSteps, steps.Bytes()) {
		t.Errorf("%s is not WriteWorkflowSteps' output; regenerate with WORKFLOW_UPDATE=1", workflowStepsFile)
	}
}

func TestWorkflowStepsFile(t *testing.T) {
	data, err := os.ReadFile(workflowStepsFile)
	if err != nil {
		t.Fatal(err)
	}
	var steps []plan.Step
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&steps); err != nil {
		t.Fatal(err)
	}
	var names []string
	mem := store.NewMemory(store.Options{})
	defer mem.Close()
	h := Builtin.New(Builtin.Name, mem)
	covered := map[string]string{}
	for i, s := range steps {
		names = append(names, s.Name)
		if !strings.Contains(s.Prompt, "Follow this workflow in order. Do NOT skip steps or go back.") {
			t.Errorf("step %s: prompt %q lacks the order instruction", s.Name, s.Prompt)
		}
		if s.MaxIterations != 10 || s.MaxRetries != 3 {
			t.Errorf("step %s: budget %d / retries %d, want 10 / 3", s.Name, s.MaxIterations, s.MaxRetries)
		}
		if len(s.Tools) == 0 || s.ValidationTools == nil {
			t.Errorf("step %s: tools %v, validation_tools %v", s.Name, s.Tools, s.ValidationTools)
		}
		for _, tool := range s.Tools {
			if _, ok := h.Tool(tool); !ok {
				t.Errorf("step %s: unknown tool %s", s.Name, tool)
			}
			if other, dup := covered[tool]; dup {
				t.Errorf("tool %s is in steps %s and %s", tool, other, s.Name)
			}
			covered[tool] = s.Name
			if workflowToolStep[tool] != i+1 {
				t.Errorf("tool %s is in step %s but verify counts it in step %d", tool, s.Name, workflowToolStep[tool])
			}
		}
		for _, v := range s.ValidationTools {
			if !slices.Contains(s.Tools, v) {
				t.Errorf("step %s: validation tool %s is not one of its tools", s.Name, v)
			}
		}
	}
	if !slices.Equal(names, []string{"discovery", "configuration", "assembly"}) {
		t.Errorf("steps %v", names)
	}
	if !slices.Equal(steps[1].ValidationTools, []string{"validate_config"}) || !slices.Equal(steps[2].ValidationTools, []string{"validate_pipeline"}) || len(steps[0].ValidationTools) != 0 {
		t.Errorf("validation tools: %v, %v, %v", steps[0].ValidationTools, steps[1].ValidationTools, steps[2].ValidationTools)
	}
	for _, tool := range workflowTools {
		if covered[tool.name] == "" {
			t.Errorf("no step offers %s", tool.name)
		}
	}
}

// TestWorkflowReferencePlans plays every row of data/workflow.jsonl: the whole plan earns reward
// 1. For every tenth row it also plays the plan without each of its calls in turn: leaving out a
// required call earns less, leaving out an optional one does not matter.
func TestWorkflowReferencePlans(t *testing.T) {
	_, srv := gymtest.Start(t, Builtin, gym.Options{})
	rows := gymtest.ReadJSONL(t, workflowDataFile)
	if len(rows) != 60 {
		t.Fatalf("%d rows", len(rows))
	}
	for index, row := range rows {
		id := string(workflowField(t, row, "id"))
		t.Run(strings.Trim(id, `"`), func(t *testing.T) {
			t.Parallel()
			s := gymtest.NewSession(t, srv)
			seedWorkflow(t, s, row)
			response, statuses := workflowPlay(t, s, row, nil)
			for i, code := range statuses {
				if code != http.StatusOK {
					t.Errorf("call %d answered %d", i, code)
				}
			}
			got := s.Verify(row, response)
			wantWorkflow(t, got, map[string]any{
				"reward": 1.0, "reason": "ok", "deployed": true, "components_correct": 1.0, "config_valid": true,
				"config_matches": true, "validated_before_deploy": true, "validation_failures": 0.0, "steps_in_order": true,
			})
			if index%10 != 0 {
				return // every tenth row (two of each difficulty) for the calls left out: they take long
			}
			p := workflowPlanOf(t, row)
			for i, c := range p.Calls() {
				s := gymtest.NewSession(t, srv)
				seedWorkflow(t, s, row)
				response, _ := workflowPlay(t, s, row, map[int]bool{i: true})
				got := s.Verify(row, response)
				if c.Optional && got["reward"] != 1.0 {
					t.Errorf("without optional call %d (%s): reward %v (%v)", i, c.Name, got["reward"], got["reason"])
				}
				if !c.Optional && got["reward"] == 1.0 {
					t.Errorf("without required call %d (%s): reward 1", i, c.Name)
				}
			}
		})
	}
}

func wantWorkflow(t *testing.T, got map[string]any, want map[string]any) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %#v, want %#v (reason %v)", k, got[k], w, got["reason"])
		}
	}
}

// workflowTaskParts is the first row of the data file with the parts the tests need.
type workflowTaskParts struct {
	row    []byte
	source workflowComponent
	reqs   []struct {
		ComponentID string         `json:"component_id"`
		Config      map[string]any `json:"config"`
	}
}

func workflowTaskOf(t *testing.T, difficulty string) workflowTaskParts {
	t.Helper()
	for _, row := range gymtest.ReadJSONL(t, workflowDataFile) {
		var r struct {
			Difficulty   string              `json:"difficulty"`
			Catalog      []workflowComponent `json:"catalog"`
			Requirements struct {
				Components []struct {
					ComponentID string         `json:"component_id"`
					Config      map[string]any `json:"config"`
				} `json:"components"`
			} `json:"requirements"`
		}
		if err := json.Unmarshal(row, &r); err != nil {
			t.Fatal(err)
		}
		if r.Difficulty != difficulty {
			continue
		}
		parts := workflowTaskParts{row: row, reqs: r.Requirements.Components}
		for _, c := range r.Catalog {
			if c.ComponentID == r.Requirements.Components[0].ComponentID {
				parts.source = c
			}
		}
		return parts
	}
	t.Fatalf("no %s task", difficulty)
	return workflowTaskParts{}
}

type workflowValidation struct {
	Valid  bool `json:"valid"`
	Errors []struct {
		Property string `json:"property"`
		Message  string `json:"message"`
	} `json:"errors"`
	Deployed         bool            `json:"deployed"`
	NormalizedConfig json.RawMessage `json:"normalized_config"`
	PipelineID       string          `json:"pipeline_id"`
}

func (v workflowValidation) names(property string) bool {
	for _, e := range v.Errors {
		if e.Property == property && e.Message != "" {
			return true
		}
	}
	return false
}

func workflowCall(t *testing.T, s *gymtest.Session, tool string, args any) workflowValidation {
	t.Helper()
	out := s.MustPost("/"+tool, workflowJSON(t, args))
	var v workflowValidation
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s: %s: %v", tool, out, err)
	}
	return v
}

func TestWorkflowValidateConfigErrors(t *testing.T) {
	_, srv := gymtest.Start(t, Builtin, gym.Options{})
	task := workflowTaskOf(t, "medium")
	s := gymtest.NewSession(t, srv)
	seedWorkflow(t, s, task.row)
	src := task.reqs[0]
	good := map[string]any{}
	for k, v := range src.Config {
		good[k] = v
	}
	if v := workflowCall(t, s, "validate_config", map[string]any{"component_id": src.ComponentID, "config": good}); !v.Valid || len(v.Errors) != 0 || len(v.NormalizedConfig) == 0 || string(v.NormalizedConfig) == "null" {
		t.Fatalf("the required configuration is not valid: %+v", v)
	}

	without := func(key string) map[string]any {
		m := map[string]any{}
		for k, v := range good {
			if k != key {
				m[k] = v
			}
		}
		return m
	}
	with := func(key string, value any) map[string]any {
		m := without(key)
		m[key] = value
		return m
	}
	failures := 0
	for name, tc := range map[string]struct {
		config   map[string]any
		property string
		message  string
	}{
		"missing credential": {without("credential"), "credential", "missing"},
		"bad credential":     {with("credential", "cred-nope"), "credential", "must be one of"},
		"wrong type":         {with("credential", 42), "credential", "must be a string"},
		"unknown property":   {with("colour", "blue"), "colour", "not a property"},
	} {
		v := workflowCall(t, s, "validate_config", map[string]any{"component_id": src.ComponentID, "config": tc.config})
		failures++
		if v.Valid || !v.names(tc.property) || string(v.NormalizedConfig) != "null" {
			t.Errorf("%s: %+v, want valid false with an error naming %s", name, v, tc.property)
			continue
		}
		for _, e := range v.Errors {
			if e.Property == tc.property && !strings.Contains(e.Message, tc.message) {
				t.Errorf("%s: message %q, want it to say %q", name, e.Message, tc.message)
			}
		}
	}
	// a property of each schema type
	schema, err := parseWorkflowSchema(task.source.ConfigSchema)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range schema.Properties {
		if len(p.Enum) > 0 && p.Name != "credential" {
			v := workflowCall(t, s, "validate_config", map[string]any{"component_id": src.ComponentID, "config": with(p.Name, "not-an-option")})
			failures++
			if v.Valid || !v.names(p.Name) {
				t.Errorf("enum %s: %+v", p.Name, v)
			}
		}
		if p.Type == "integer" {
			v := workflowCall(t, s, "validate_config", map[string]any{"component_id": src.ComponentID, "config": with(p.Name, 1e9)})
			failures++
			if v.Valid || !v.names(p.Name) {
				t.Errorf("integer %s out of range: %+v", p.Name, v)
			}
		}
	}
	failures++
	if v := workflowCall(t, s, "validate_config", map[string]any{"component_id": "cmp-nope", "config": good}); v.Valid || !v.names("component_id") {
		t.Errorf("unknown component: %+v", v)
	}

	// the failures are counted, and do not stand in the way of the plan
	response, _ := workflowPlay(t, s, task.row, nil)
	wantWorkflow(t, s.Verify(task.row, response), map[string]any{"reward": 1.0, "validation_failures": float64(failures)})
}

func TestWorkflowDeployBeforeValidate(t *testing.T) {
	_, srv := gymtest.Start(t, Builtin, gym.Options{})
	task := workflowTaskOf(t, "easy")
	p := workflowPlanOf(t, task.row)
	calls := p.Calls()
	deploy, validate := len(calls)-1, len(calls)-2
	if calls[deploy].Name != "deploy_pipeline" || calls[validate].Name != "validate_pipeline" {
		t.Fatalf("plan ends with %s, %s", calls[validate].Name, calls[deploy].Name)
	}
	s := gymtest.NewSession(t, srv)
	seedWorkflow(t, s, task.row)
	// everything up to assemble_pipeline
	response, _ := workflowPlay(t, s, task.row, map[int]bool{validate: true, deploy: true})
	got := s.Verify(task.row, response)
	wantWorkflow(t, got, map[string]any{"reward": 0.0, "deployed": false, "validated_before_deploy": false})
	if !strings.HasPrefix(got["reason"].(string), "not_deployed") {
		t.Errorf("reason %v", got["reason"])
	}

	refused := workflowCall(t, s, "deploy_pipeline", map[string]any{"pipeline_id": "pl-001"})
	if refused.Deployed || !refused.names("pipeline_id") {
		t.Fatalf("deploy before validate: %+v, want a refusal naming pipeline_id", refused)
	}
	if v := workflowCall(t, s, "deploy_pipeline", map[string]any{"pipeline_id": "pl-999"}); v.Deployed || !v.names("pipeline_id") {
		t.Errorf("deploy of an unknown pipeline: %+v", v)
	}
	if v := workflowCall(t, s, "validate_pipeline", map[string]any{"pipeline_id": "pl-001"}); !v.Valid {
		t.Fatalf("validate_pipeline: %+v", v)
	}
	if v := workflowCall(t, s, "deploy_pipeline", map[string]any{"pipeline_id": "pl-001"}); !v.Deployed {
		t.Fatalf("deploy after validate: %+v", v)
	}
	got = s.Verify(task.row, response)
	wantWorkflow(t, got, map[string]any{"reward": 1.0, "deployed": true, "validated_before_deploy": false, "pipeline_id": "pl-001"})
}

func TestWorkflowPipelineChecks(t *testing.T) {
	_, srv := gymtest.Start(t, Builtin, gym.Options{})
	task := workflowTaskOf(t, "hard")
	var catalog []workflowComponent
	if err := json.Unmarshal(workflowField(t, task.row, "catalog"), &catalog); err != nil {
		t.Fatal(err)
	}
	s := gymtest.NewSession(t, srv)
	seedWorkflow(t, s, task.row)
	stage := func(i int) map[string]any {
		return map[string]any{"component_id": task.reqs[i].ComponentID, "config": task.reqs[i].Config}
	}
	n := len(task.reqs)
	var stages []any
	for i := range n {
		stages = append(stages, stage(i))
	}
	// configurations not validated yet
	a := workflowCall(t, s, "assemble_pipeline", map[string]any{"components": stages})
	v := workflowCall(t, s, "validate_pipeline", map[string]any{"pipeline_id": a.PipelineID})
	for i := range n {
		if !v.names(fmt.Sprintf("components[%d].config", i)) {
			t.Errorf("unvalidated config %d not reported: %+v", i, v)
		}
	}
	for i := range n {
		if c := workflowCall(t, s, "validate_config", stage(i)); !c.Valid {
			t.Fatalf("validate_config %d: %+v", i, c)
		}
	}
	// wrong order, and a deprecated component instead of the source
	var deprecated string
	for _, c := range catalog {
		if c.Deprecated && c.Kind == "source" {
			deprecated = c.ComponentID
		}
	}
	reversed := slices.Clone(stages)
	slices.Reverse(reversed)
	a = workflowCall(t, s, "assemble_pipeline", map[string]any{"components": reversed})
	v = workflowCall(t, s, "validate_pipeline", map[string]any{"pipeline_id": a.PipelineID})
	if v.Valid || !v.names("components[0]") || !v.names(fmt.Sprintf("components[%d]", n-1)) {
		t.Errorf("reversed pipeline: %+v", v)
	}
	withDeprecated := slices.Clone(stages)
	withDeprecated[0] = map[string]any{"component_id": deprecated, "config": task.reqs[0].Config}
	a = workflowCall(t, s, "assemble_pipeline", map[string]any{"components": withDeprecated})
	v = workflowCall(t, s, "validate_pipeline", map[string]any{"pipeline_id": a.PipelineID})
	if v.Valid || !v.names("components[0].component_id") {
		t.Errorf("deprecated source: %+v", v)
	}
	if v := workflowCall(t, s, "validate_pipeline", map[string]any{"pipeline_id": "nope"}); v.Valid || !v.names("pipeline_id") {
		t.Errorf("unknown pipeline: %+v", v)
	}

	// a pipeline without the last transform deploys, but it is not what the task asked for
	short := append(slices.Clone(stages[:n-2]), stages[n-1])
	a = workflowCall(t, s, "assemble_pipeline", map[string]any{"components": short})
	if v := workflowCall(t, s, "validate_pipeline", map[string]any{"pipeline_id": a.PipelineID}); !v.Valid {
		t.Fatalf("short pipeline: %+v", v)
	}
	if v := workflowCall(t, s, "deploy_pipeline", map[string]any{"pipeline_id": a.PipelineID}); !v.Deployed {
		t.Fatalf("deploy: %+v", v)
	}
	got := s.Verify(task.row, workflowJSON(t, map[string]any{"id": "r", "created_at": 0, "model": "m", "object": "response",
		"output": []any{}, "parallel_tool_calls": false, "tool_choice": "auto", "tools": []any{}}))
	want := float64(n-2) / float64(n)
	wantWorkflow(t, got, map[string]any{"reward": 0.0, "deployed": true, "components_correct": want, "config_matches": false,
		"steps_in_order": false}) // validate_config came after assembly, and no discovery call
	if !strings.HasPrefix(got["reason"].(string), "wrong_components") {
		t.Errorf("reason %v", got["reason"])
	}

	// the right components with a wrong value
	wrong := slices.Clone(stages)
	cfg := map[string]any{}
	for k, v := range task.reqs[n-1].Config {
		cfg[k] = v
	}
	s2 := gymtest.NewSession(t, srv)
	seedWorkflow(t, s2, task.row)
	schema, err := parseWorkflowSchema(func() json.RawMessage {
		for _, c := range catalog {
			if c.ComponentID == task.reqs[n-1].ComponentID {
				return c.ConfigSchema
			}
		}
		return nil
	}())
	if err != nil {
		t.Fatal(err)
	}
	// change one required value of the sink to another valid one
	changed := ""
	for _, p := range schema.Properties {
		if cfg[p.Name] == nil || p.Name == "credential" || p.Type != "string" {
			continue
		}
		switch {
		case len(p.Enum) > 0:
			for _, e := range p.Enum {
				if e != cfg[p.Name] {
					cfg[p.Name], changed = e, p.Name
					break
				}
			}
		case p.Pattern == "":
			cfg[p.Name], changed = "something_else", p.Name
		}
		if changed != "" {
			break
		}
	}
	if changed == "" {
		t.Fatalf("no required value of %s to change", task.reqs[n-1].ComponentID)
	}
	wrong[n-1] = map[string]any{"component_id": task.reqs[n-1].ComponentID, "config": cfg}
	for _, st := range wrong {
		workflowCall(t, s2, "validate_config", st)
	}
	a = workflowCall(t, s2, "assemble_pipeline", map[string]any{"components": wrong})
	workflowCall(t, s2, "validate_pipeline", map[string]any{"pipeline_id": a.PipelineID})
	workflowCall(t, s2, "deploy_pipeline", map[string]any{"pipeline_id": a.PipelineID})
	got = s2.Verify(task.row, workflowJSON(t, map[string]any{"id": "r", "created_at": 0, "model": "m", "object": "response",
		"output": []any{}, "parallel_tool_calls": false, "tool_choice": "auto", "tools": []any{}}))
	wantWorkflow(t, got, map[string]any{"reward": 0.0, "components_correct": 1.0, "config_valid": true, "config_matches": false})
	if r := got["reason"].(string); !strings.HasPrefix(r, "config_mismatch") || !strings.Contains(r, changed) {
		t.Errorf("reason %q, want a config_mismatch naming %s", r, changed)
	}
}

func TestWorkflowDiscovery(t *testing.T) {
	_, srv := gymtest.Start(t, Builtin, gym.Options{})
	task := workflowTaskOf(t, "hard")
	s := gymtest.NewSession(t, srv)
	seedWorkflow(t, s, task.row)

	var search struct {
		Results []workflowEntry `json:"results"`
	}
	if err := json.Unmarshal(s.MustPost("/search_components", workflowJSON(t, map[string]any{"query": task.source.Name})), &search); err != nil {
		t.Fatal(err)
	}
	if len(search.Results) == 0 || search.Results[0].ComponentID != task.source.ComponentID {
		t.Fatalf("search %q: %+v", task.source.Name, search.Results)
	}
	var list struct {
		Components []workflowEntry `json:"components"`
	}
	if err := json.Unmarshal(s.MustPost("/list_components", []byte(`{"kind":"source"}`)), &list); err != nil {
		t.Fatal(err)
	}
	deprecatedSources := 0
	for _, c := range list.Components {
		if c.Kind != "source" {
			t.Errorf("list_components(source) lists %+v", c)
		}
		if c.Deprecated {
			deprecatedSources++
		}
	}
	if deprecatedSources != 1 {
		t.Errorf("hard task: %d deprecated sources, want the look-alike", deprecatedSources)
	}
	all := gymtest.Decode(t, s.MustPost("/list_components", []byte(`{}`)))
	if all["kind"] != nil || len(all["components"].([]any)) < len(list.Components) {
		t.Errorf("list_components({}): %v", all)
	}
	info := gymtest.Decode(t, s.MustPost("/get_component_info", workflowJSON(t, map[string]any{"component_id": task.source.ComponentID})))
	if info["name"] != task.source.Name || info["deprecated"] != false || info["requires_credential"] != true || info["requires_worker_pool"] != false {
		t.Errorf("get_component_info: %v", info)
	}
	schema := gymtest.Decode(t, s.MustPost("/get_config_schema", workflowJSON(t, map[string]any{"component_id": task.source.ComponentID})))
	props := schema["config_schema"].(map[string]any)["properties"].(map[string]any)
	enum := props["credential"].(map[string]any)["enum"].([]any)
	if !slices.Contains(enum, task.reqs[0].Config["credential"]) || len(enum) != 3 {
		t.Errorf("credential enum %v lacks %v", enum, task.reqs[0].Config["credential"])
	}
	for _, tool := range []string{"get_component_info", "get_config_schema"} {
		code, out := s.Post("/"+tool, []byte(`{"component_id":"cmp-nope"}`))
		if code != http.StatusNotFound || !strings.Contains(string(out), `"detail"`) {
			t.Errorf("%s(unknown): %d %s, want 404", tool, code, out)
		}
	}
	// the outputs are Python-style JSON, like NeMo Gym's
	if out := s.MustPost("/list_components", []byte(`{"kind":"sink"}`)); !bytes.HasPrefix(out, []byte(`{"kind": "sink", "components": [`)) {
		t.Errorf("list_components output %s", out)
	}
}

func TestWorkflowUnseededSession(t *testing.T) {
	_, srv := gymtest.Start(t, Builtin, gym.Options{})
	task := workflowTaskOf(t, "easy")
	seeded := gymtest.NewSession(t, srv)
	seedWorkflow(t, seeded, task.row)

	s := gymtest.NewSession(t, srv) // its own jar: never seeded
	for _, tool := range workflowTools {
		args := map[string]string{
			"search_components": `{"query":"kafka"}`, "list_components": `{}`,
			"get_component_info": `{"component_id":"x"}`, "get_config_schema": `{"component_id":"x"}`,
			"validate_config": `{"component_id":"x","config":{}}`, "assemble_pipeline": `{"components":[{"component_id":"x","config":{}}]}`,
			"validate_pipeline": `{"pipeline_id":"pl-001"}`, "deploy_pipeline": `{"pipeline_id":"pl-001"}`,
		}[tool.name]
		code, out := s.Post("/"+tool.name, []byte(args))
		if code != http.StatusConflict {
			t.Errorf("%s on an unseeded session: %d %s, want 409", tool.name, code, out)
			continue
		}
		if m := gymtest.Decode(t, out); !strings.Contains(fmt.Sprint(m["detail"]), "seed_session") {
			t.Errorf("%s: 409 body %s", tool.name, out)
		}
	}
	got := s.Verify(task.row, workflowJSON(t, map[string]any{"id": "r", "created_at": 0, "model": "m", "object": "response",
		"output": []any{}, "parallel_tool_calls": false, "tool_choice": "auto", "tools": []any{}}))
	wantWorkflow(t, got, map[string]any{"reward": 0.0, "reason": "session_not_found", "deployed": false, "steps_in_order": false})

	// /end_session drops the state: the next call is a 409 again
	seeded.MustPost("/end_session", []byte(`{}`))
	if code, out := seeded.Post("/list_components", []byte(`{}`)); code != http.StatusConflict {
		t.Errorf("after end_session: %d %s", code, out)
	}
}

func TestWorkflowBadArguments(t *testing.T) {
	_, srv := gymtest.Start(t, Builtin, gym.Options{})
	task := workflowTaskOf(t, "easy")
	s := gymtest.NewSession(t, srv)
	seedWorkflow(t, s, task.row)
	for _, tc := range []struct {
		tool, body string
		loc        []any
	}{
		{"search_components", `{}`, []any{"body", "query"}},
		{"search_components", `{"query":3}`, []any{"body", "query"}},
		{"search_components", `not json`, []any{"body", 2.0}},
		{"search_components", ``, []any{"body"}},
		{"search_components", `[1]`, []any{"body"}},
		{"list_components", `{"kind":"pump"}`, []any{"body", "kind"}},
		{"get_component_info", `{"component_id":null}`, []any{"body", "component_id"}},
		{"get_config_schema", `{"id":"x"}`, []any{"body", "component_id"}},
		{"validate_config", `{"component_id":"x"}`, []any{"body", "config"}},
		{"validate_config", `{"component_id":"x","config":"topic=a"}`, []any{"body", "config"}},
		{"assemble_pipeline", `{"components":[]}`, []any{"body", "components"}},
		{"assemble_pipeline", `{"components":{"component_id":"x"}}`, []any{"body", "components"}},
		{"assemble_pipeline", `{"components":[{"config":{}}]}`, []any{"body", "components", 0.0, "component_id"}},
		{"assemble_pipeline", `{"components":[{"component_id":"x","config":[]}]}`, []any{"body", "components", 0.0, "config"}},
		{"validate_pipeline", `{}`, []any{"body", "pipeline_id"}},
		{"deploy_pipeline", `{"pipeline_id":["pl-001"]}`, []any{"body", "pipeline_id"}},
	} {
		code, out := s.Post("/"+tc.tool, []byte(tc.body))
		if code != http.StatusUnprocessableEntity {
			t.Errorf("%s(%s): %d %s, want 422", tc.tool, tc.body, code, out)
			continue
		}
		var body struct {
			Detail []struct {
				Loc []any `json:"loc"`
			} `json:"detail"`
		}
		if err := json.Unmarshal(out, &body); err != nil || len(body.Detail) == 0 {
			t.Errorf("%s(%s): body %s", tc.tool, tc.body, out)
			continue
		}
		if !slices.EqualFunc(body.Detail[0].Loc, tc.loc, func(a, b any) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
			t.Errorf("%s(%s): loc %v, want %v", tc.tool, tc.body, body.Detail[0].Loc, tc.loc)
		}
	}
	// the 422s left the session as it was: the plan still earns 1 and steps stay in order
	response, _ := workflowPlay(t, s, task.row, nil)
	wantWorkflow(t, s.Verify(task.row, response), map[string]any{"reward": 1.0, "steps_in_order": true, "validation_failures": 0.0})

	// seed_session and verify check their own fields
	for _, body := range []string{`{}`, `{"catalog":{}}`, `{"catalog":[{"component_id":"a","name":"A","kind":"pump","config_schema":{"type":"object"}}]}`,
		`{"catalog":[{"component_id":"a","name":"A","kind":"source","config_schema":{"type":"object","properties":{"x":{"type":"date"}}}}]}`,
		`{"catalog":[{"component_id":"a","name":"A","kind":"source","config_schema":{"type":"object"}},{"component_id":"a","name":"B","kind":"sink","config_schema":{"type":"object"}}]}`} {
		if code, out := gymtest.NewSession(t, srv).Post("/seed_session", []byte(body)); code != http.StatusUnprocessableEntity {
			t.Errorf("seed_session(%s): %d %s, want 422", body, code, out)
		}
	}
	resp := workflowJSON(t, map[string]any{"id": "r", "created_at": 0, "model": "m", "object": "response",
		"output": []any{}, "parallel_tool_calls": false, "tool_choice": "auto", "tools": []any{}})
	for _, req := range []any{nil, map[string]any{}, map[string]any{"components": "x"}, map[string]any{"components": []any{map[string]any{"config": map[string]any{}}}}} {
		code, out := s.Post("/verify", gymtest.WithResponse(t, gymtest.SetField(t, task.row, "requirements", req), resp))
		if code != http.StatusUnprocessableEntity {
			t.Errorf("verify with requirements %v: %d %s, want 422", req, code, out)
		}
	}
}

// TestWorkflowSessionsIsolated plays a dozen plans at once on one server, one jar each: every
// session's first pipeline is pl-001, and none sees another's state.
func TestWorkflowSessionsIsolated(t *testing.T) {
	_, srv := gymtest.Start(t, Builtin, gym.Options{})
	for i, row := range gymtest.ReadJSONL(t, workflowDataFile)[:12] {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			s := gymtest.NewSession(t, srv)
			seedWorkflow(t, s, row)
			response, _ := workflowPlay(t, s, row, nil)
			wantWorkflow(t, s.Verify(row, response), map[string]any{"reward": 1.0, "pipeline_id": "pl-001", "validation_failures": 0.0})
		})
	}
}

// A verify of a seeded session is scored on the state it read, or answered 409
// session_not_found, when the Redis restarts empty during the verify (see the counter's test of
// the same name).
func TestSharedStoreRestartDuringVerify(t *testing.T) {
	gymtest.RestartDuringVerify(t, Builtin, func(t *testing.T, s *gymtest.Session) []byte {
		row := workflowRows(t, 1, 1)[0]
		seedWorkflow(t, s, row)
		resp, _ := workflowPlay(t, s, row, nil)
		return gymtest.WithResponse(t, row, resp)
	})
}
