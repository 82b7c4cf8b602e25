// Package validate checks task files before they are run: Lint finds what is wrong with the
// rows (schema, tools' JSON Schemas, duplicate ids, reference plans that name unknown tools),
// and Oracle proves with the simulator that every task is solvable by its reference plan and
// that each required call of the plan is needed.
package validate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/plan"
)

// Problem is one finding, located by file and line.
type Problem struct {
	File   string
	Line   int
	TaskID string
	Field  string // the row field it is about, e.g. "responses_create_params.tools[2].parameters"
	Msg    string
	// Warning marks findings that do not stop a run (e.g. two tasks the simulator cannot tell
	// apart); errors do.
	Warning bool
}

func (p Problem) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d: ", p.File, p.Line)
	if p.Warning {
		b.WriteString("warning: ")
	}
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Report is what Lint found in one file.
type Report struct {
	File     string
	Tasks    int // rows read
	Plans    int // rows with a reference plan
	Problems []Problem
}

// Errors counts the problems that are not warnings.
func (r *Report) Errors() int {
	n := 0
	for _, p := range r.Problems {
		if !p.Warning {
			n++
		}
	}
	return n
}

// Lint reads the task file at path and checks every row:
//   - the row itself (JSON, responses_create_params, agent_ref), as `rollout run` reads it;
//   - every tool's parameters compile as a JSON Schema;
//   - no two rows share an id;
//   - the reference_plan, when present, parses (see package plan) and calls only tools the row
//     offers;
//   - the file has a task at all (an empty file, or one of blank lines, is an error: rollout
//     run refuses it).
//
// It returns an error only when the file cannot be read; what is wrong with rows is in the
// report.
func Lint(path string) (*Report, error) {
	r, err := dataset.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	rep := &Report{File: r.Name()}
	ids := map[string]int{} // id → line
	for {
		t, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return rep, err
		}
		rep.Tasks++
		add := func(field, format string, args ...any) {
			rep.Problems = append(rep.Problems, Problem{File: t.File, Line: t.Line, TaskID: t.ID, Field: field, Msg: fmt.Sprintf(format, args...)})
		}
		if t.Err != nil {
			rep.Problems = append(rep.Problems, Problem{File: t.File, Line: t.Line, TaskID: t.ID, Field: t.Err.Field, Msg: t.Err.Msg})
			continue
		}
		if t.ID != "" {
			if first, dup := ids[t.ID]; dup {
				add("id", "%s is also the id of line %d", t.ID, first)
			} else {
				ids[t.ID] = t.Line
			}
		}
		offered := lintTools(t, add)
		if raw := t.Field(plan.Field); raw != nil && !isNull(raw) {
			rep.Plans++
			p, err := plan.Parse(raw)
			if err != nil {
				add(plan.Field, "%v", err)
				continue
			}
			for r, round := range p.Rounds {
				for i, c := range round {
					if !offered[c.Name] {
						add(fmt.Sprintf("%s.rounds[%d][%d].name", plan.Field, r, i), "unknown tool %q: the row offers %s", c.Name, list(offered))
					}
				}
			}
		}
	}
	if rep.Tasks == 0 {
		rep.Problems = append(rep.Problems, Problem{File: rep.File, Line: 1, Msg: "no tasks: the file is empty or holds only blank lines (rollout run refuses it)"})
	}
	return rep, nil
}

// lintTools checks the row's tools and returns the set of their names.
func lintTools(t *dataset.Task, add func(field, format string, args ...any)) map[string]bool {
	names := map[string]bool{}
	for i, tool := range t.Params.Tools {
		where := fmt.Sprintf("responses_create_params.tools[%d]", i)
		names[tool.Name] = true // the reader already refused rows with two tools of one name
		if tool.Parameters == nil || isNull(tool.Parameters) {
			continue
		}
		if err := checkSchema(tool.Parameters); err != nil {
			add(where+".parameters", "not a valid JSON Schema: %v", err)
		}
	}
	return names
}

// checkSchema compiles raw as a JSON Schema (draft 2020-12 unless it says otherwise), which
// validates it against its meta-schema. Remote references are not fetched.
func checkSchema(raw []byte) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("parameters.json", doc); err != nil {
		return err
	}
	_, err = c.Compile("parameters.json")
	if err != nil {
		return errors.New(oneLine(err.Error()))
	}
	return nil
}

// oneLine joins a multi-line library message into one line.
func oneLine(s string) string {
	lines := strings.Fields(strings.ReplaceAll(s, "\n", " "))
	return strings.Join(lines, " ")
}

func list(set map[string]bool) string {
	if len(set) == 0 {
		return "no tools"
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func isNull(raw []byte) bool { return string(bytes.TrimSpace(raw)) == "null" }
