package sim

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/plan"
)

// maxWarnings is how many warnings Tasks keeps (all are counted).
const maxWarnings = 100

// Tasks indexes tasks by the conversation the runner opens them with, so that the simulator can
// find a request's reference plan.
//
// The key is the text of the first user message, as the runner sends it: the first input
// message with role "user" (a string input is that message), its content's text parts joined
// with "" (pkg/dataset and pkg/agent's ChatMessages do the same). When several tasks share
// that text, the one whose whole prompt matches (the system and user messages before the
// first assistant message, the instructions first as a system message, developer read as
// system) is chosen, else the first loaded.
type Tasks struct {
	byUser   map[string][]*entry
	rows     int
	plans    int
	skipped  int
	warnings []string
	nwarn    int
}

type entry struct {
	file    string
	line    int
	prompt  string
	planRaw []byte
	plan    *plan.Plan // nil: the task has no plan
}

// NewTasks indexes tasks read elsewhere (dataset.NewReader). Like LoadTasks, it skips rows
// with errors (Skipped) and fails on an invalid reference_plan.
func NewTasks(rows ...*dataset.Task) (*Tasks, error) {
	ts := &Tasks{byUser: map[string][]*entry{}}
	for _, t := range rows {
		if err := ts.Add(t); err != nil {
			return nil, err
		}
	}
	return ts, nil
}

// LoadTasks reads NeMo Gym JSONL task files (gzip detected; "-" is stdin). A malformed row is
// skipped and counted (Skipped, Warnings); a row whose reference_plan is invalid is an
// error, "FILE:LINE: reference_plan.WHERE: message".
func LoadTasks(paths ...string) (*Tasks, error) {
	ts := &Tasks{byUser: map[string][]*entry{}}
	for _, path := range paths {
		if err := ts.load(path); err != nil {
			return nil, err
		}
	}
	return ts, nil
}

func (ts *Tasks) load(path string) error {
	return dataset.ReadFile(path, ts.Add)
}

// Add indexes one task. A task with Err is skipped with a warning.
func (ts *Tasks) Add(t *dataset.Task) error {
	if t.Err != nil {
		ts.skipped++
		ts.warn("%v (row skipped)", t.Err)
		return nil
	}
	if t.Params == nil {
		ts.skipped++
		ts.warn("%s:%d: no responses_create_params (row skipped)", t.File, t.Line)
		return nil
	}
	e := &entry{file: t.File, line: t.Line}
	if raw := bytes.TrimSpace(t.Field(plan.Field)); len(raw) > 0 && string(raw) != "null" {
		p, err := plan.Parse(raw)
		if err != nil {
			return fmt.Errorf("%s:%d: %s", t.File, t.Line, planError(err))
		}
		e.plan, e.planRaw = p, raw
	}
	firstUser, prompt := taskPrompt(t.Params)
	e.prompt = prompt
	ts.rows++
	if e.plan != nil {
		ts.plans++
	}
	for _, o := range ts.byUser[firstUser] {
		if o.prompt == prompt {
			if !bytes.Equal(o.planRaw, e.planRaw) {
				ts.warn("%s:%d: same prompt as %s:%d but another reference_plan; the first one is played", e.file, e.line, o.file, o.line)
			}
			return nil
		}
	}
	ts.byUser[firstUser] = append(ts.byUser[firstUser], e)
	return nil
}

// planError places a plan.Parse error under the reference_plan field: "reference_plan.WHERE:
// message", or "reference_plan: message" when the plan is not even a JSON object of the right
// shape.
func planError(err error) string {
	msg := err.Error()
	if strings.HasPrefix(msg, "rounds") || strings.HasPrefix(msg, "final") {
		return plan.Field + "." + msg
	}
	return plan.Field + ": " + msg
}

func (ts *Tasks) warn(format string, args ...any) {
	ts.nwarn++
	if len(ts.warnings) < maxWarnings {
		ts.warnings = append(ts.warnings, fmt.Sprintf(format, args...))
	}
}

// Len is the number of tasks read (rows not skipped).
func (ts *Tasks) Len() int { return ts.rows }

// Plans is the number of tasks read with a reference plan.
func (ts *Tasks) Plans() int { return ts.plans }

// Skipped is the number of malformed rows skipped.
func (ts *Tasks) Skipped() int { return ts.skipped }

// Warnings are the first warnings (skipped rows, prompts shared by tasks with different
// plans); NumWarnings counts them all.
func (ts *Tasks) Warnings() []string { return ts.warnings }

// NumWarnings is the number of warnings, kept or not.
func (ts *Tasks) NumWarnings() int { return ts.nwarn }

// Plan returns the plan of the task whose first user message is firstUser (nil when there is
// no such task or it has no plan).
func (ts *Tasks) Plan(firstUser string) *plan.Plan {
	if e := ts.lookup(firstUser, ""); e != nil {
		return e.plan
	}
	return nil
}

func (ts *Tasks) lookup(firstUser, prompt string) *entry {
	if ts == nil {
		return nil
	}
	cands := ts.byUser[firstUser]
	switch len(cands) {
	case 0:
		return nil
	case 1:
		return cands[0]
	}
	for _, e := range cands {
		if e.prompt == prompt {
			return e
		}
	}
	return cands[0]
}

// taskPrompt is a task's first user message and its prompt key, as the runner will send them
// (pkg/agent.ChatMessages: instructions as a system message, then the input; developer
// becomes system).
func taskPrompt(p *dataset.Params) (firstUser, prompt string) {
	var b strings.Builder
	if p.Instructions != "" {
		promptAdd(&b, "system", p.Instructions)
	}
	open, found := true, false
	for _, it := range p.Input {
		if it.Type != dataset.ItemMessage || it.Role == "assistant" {
			open = false
			continue
		}
		if it.Role == "user" && !found {
			firstUser, found = it.Content, true
		}
		if open {
			promptAdd(&b, it.Role, it.Content)
		}
	}
	return firstUser, b.String()
}

func promptAdd(b *strings.Builder, role, text string) {
	if role == "developer" {
		role = "system"
	}
	b.WriteString(role)
	b.WriteByte(0)
	b.WriteString(text)
	b.WriteByte(0)
}
