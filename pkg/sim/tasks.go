package sim

import (
	"bytes"
	"fmt"
	"net/url"
	"strconv"
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
//
// Tasks with the same prompt and different reference plans (the same question asked of two
// worlds, as `rollout gen` writes at two seeds) are told apart by the rollout a request names
// in its X-Rollout-Id header ("ARM/FILE/TASK/K", which rollout's runner sends): the task at
// row TASK of FILE, or the one loaded task at row TASK when FILE is not a loaded path. A
// request that names none of them is refused (HTTP 400, both rows named) rather than given
// another task's plan.
type Tasks struct {
	byUser   map[string][]*entry
	rows     int
	plans    int
	skipped  int
	warnings []string
	nwarn    int
}

// row is a task's place: its file and 0-based row.
type row struct {
	file  string
	index int
}

type entry struct {
	file    string
	line    int
	index   int   // 0-based row of file (dataset.Task.Index)
	repeats []row // later rows with the same prompt and plan, which this entry serves
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
	e := &entry{file: t.File, line: t.Line, index: t.Index}
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
		if o.prompt == prompt && bytes.Equal(o.planRaw, e.planRaw) {
			o.repeats = append(o.repeats, row{e.file, e.index}) // the same task again
			return nil
		}
	}
	for _, o := range ts.byUser[firstUser] {
		if o.prompt == prompt {
			ts.warn("%s:%d: same prompt as %s:%d but another reference_plan; each request is matched to its row by its %s header", e.file, e.line, o.file, o.line, RolloutHeader)
			break
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
	if e, _ := ts.lookup(firstUser, "", ""); e != nil {
		return e.plan
	}
	return nil
}

// lookup finds the task of a request: by its first user message, then its whole prompt, then
// (when tasks share the prompt but not the plan) the row that rolloutID names. An error says
// which rows the request could belong to.
func (ts *Tasks) lookup(firstUser, prompt, rolloutID string) (*entry, error) {
	if ts == nil {
		return nil, nil
	}
	cands := ts.byUser[firstUser]
	switch len(cands) {
	case 0:
		return nil, nil
	case 1:
		return cands[0], nil
	}
	var same []*entry
	for _, e := range cands {
		if e.prompt == prompt {
			same = append(same, e)
		}
	}
	switch len(same) {
	case 0:
		return cands[0], nil
	case 1:
		return same[0], nil
	}
	file, index, ok := parseRolloutID(rolloutID)
	if ok {
		var byIndex []*entry
		for _, e := range same {
			for _, r := range append([]row{{e.file, e.index}}, e.repeats...) {
				if r.index != index {
					continue
				}
				if r.file == file {
					return e, nil
				}
				byIndex = append(byIndex, e)
			}
		}
		if len(byIndex) == 1 {
			return byIndex[0], nil
		}
	}
	rows := make([]string, len(same))
	for i, e := range same {
		rows[i] = fmt.Sprintf("%s:%d", e.file, e.line)
	}
	header := "no " + RolloutHeader + " header"
	if rolloutID != "" {
		header = RolloutHeader + " " + strconv.Quote(rolloutID) + ", which names none of them"
	}
	return nil, fmt.Errorf("the simulator has %d tasks with this prompt and different reference plans (%s), and the request has %s",
		len(same), strings.Join(rows, ", "), header)
}

// parseRolloutID reads the task file and row out of an X-Rollout-Id value, "ARM/FILE/TASK/K"
// with ARM and FILE query-escaped.
func parseRolloutID(id string) (file string, index int, ok bool) {
	parts := strings.Split(id, "/")
	if len(parts) != 4 {
		return "", 0, false
	}
	file, err := url.QueryUnescape(parts[1])
	if err != nil {
		return "", 0, false
	}
	index, err = strconv.Atoi(parts[2])
	return file, index, err == nil && index >= 0
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
