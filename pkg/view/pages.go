package view

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// linker makes the pages' links: URLs of the server, or anchors of the one-file report
// ("" when the target is not in it).
type linker interface {
	rollouts(q Query) string
	trajectory(k Key) string
	compare(a, b Side) string
	pair(a, b Key) string
}

// Key names one rollout of the loaded runs.
type Key struct {
	Run     int
	Task    int64
	Rollout int64
	Arm     string
}

// Setting is one line of a run's manifest.
type Setting struct{ Name, Value string }

// RunInfo is a run as the overview lists it.
type RunInfo struct {
	Index    int
	Dir      string
	Status   string // "" for a finished run, else "incomplete: 171 of 480 rollouts", "running: …"
	Live     bool
	Settings []Setting
}

// ArmRow is one line of the overview's score table.
type ArmRow struct {
	Scope, Mean, CI, StdErr string
	Scored, Rollouts, Fail  int
	Link                    string // its rollouts
}

// Overview is the overview page's data.
type Overview struct {
	Runs                 []RunInfo
	EvalSource           string
	Rollouts             int
	Overall              ArmRow
	Arms                 []ArmRow
	Groups               []ArmRow
	GroupBy              string
	ArmCI, GroupCI       *CIChart
	ArmGroupCI           *CIChart
	PassAt, PassHat      *LineChart
	Terminations         *StackChart
	Failures             *StackChart
	Hists                []*Histogram
	Compares             []Link
	FailedLink, AllLinks string
	// Board puts several runs side by side: a row per run and arm, against the baseline run.
	Board []BoardRow
	// BoardMethod says how Board's numbers are computed.
	BoardMethod string
}

// BoardRow is one row of the overview's leaderboard of several runs.
type BoardRow struct {
	Run, Arm, Status, Mean, CI, PassAt1, Tokens string
	Diff, DiffCI, Note                          string
	Pairs                                       int
	Baseline                                    bool
	Link                                        string // its comparison with the baseline
}

// board is the leaderboard of several runs (nil for one run).
func (d *Data) board(l linker) ([]BoardRow, string) {
	if len(d.Runs) < 2 {
		return nil, ""
	}
	runs := make([]report.LeaderRun, len(d.Runs))
	for i, r := range d.Runs {
		run := i
		runs[i] = report.LeaderRun{Name: fmt.Sprintf("%d %s", i, r.Dir), Status: r.Status, Records: func(yield func(*record.Record) bool) {
			for j := range d.rows {
				if int(d.rows[j].run) == run {
					rec := d.record(j)
					if !yield(&rec) {
						return
					}
				}
			}
		}}
	}
	o := d.Evaluation.Options
	o.GroupBy = "" // groups have their own tables
	lb, err := report.NewLeaderboard(runs, d.opts.Baseline, o)
	if err != nil {
		return nil, ""
	}
	var out []BoardRow
	for _, r := range lb.Rows {
		s := &r.Scores
		b := BoardRow{Run: r.Run, Arm: r.Arm, Status: r.Status, Mean: "-", CI: "-", PassAt1: "-", Tokens: "-", Baseline: r.IsBaseline}
		if s.Scored > 0 {
			b.Mean = num(s.MeanReward)
			if s.CI95 != nil {
				b.CI = num(s.CI95.Low) + " to " + num(s.CI95.High)
			}
		}
		if p, ok := s.Pass(1); ok {
			b.PassAt1 = num(p.PassAt)
		}
		if s.Rollouts > s.Failed {
			b.Tokens = strconv.FormatFloat(s.MeanPromptTokens+s.MeanCompletionTokens, 'f', 1, 64)
		}
		if v := r.VsBaseline; v != nil {
			b.Pairs, b.Note = v.Pairs, v.Note
			if v.Pairs > 0 {
				b.Diff = fmt.Sprintf("%+.4f", v.MeanDiff)
				if v.CI95 != nil {
					b.DiffCI = fmt.Sprintf("%+.4f to %+.4f", v.CI95.Low, v.CI95.High)
				}
				run, _ := strconv.Atoi(strings.Fields(r.Run)[0])
				against := strings.TrimPrefix(v.Against, lb.Baseline+" ")
				b.Link = l.compare(Side{d.opts.Baseline, against}, Side{run, r.Arm})
			}
		}
		out = append(out, b)
	}
	return out, lb.Baseline
}

// Link is a labelled URL.
type Link struct{ Label, URL string }

func scoreRow(s *report.Scores, link string) ArmRow {
	r := ArmRow{Scope: s.Scope, Scored: s.Scored, Rollouts: s.Rollouts, Fail: s.Failed, Link: link, Mean: "-", CI: "-", StdErr: "-"}
	if s.Scored > 0 {
		r.Mean, r.StdErr = num(s.MeanReward), num(s.StdErr)
		if s.CI95 != nil {
			r.CI = fmt.Sprintf("%s to %s", num(s.CI95.Low), num(s.CI95.High))
		}
	}
	return r
}

// overview computes the overview (once: its histograms go over every rollout).
func (d *Data) overview(l linker) *Overview {
	e := d.Evaluation
	o := &Overview{EvalSource: d.EvalSource, Rollouts: len(d.rows), GroupBy: e.Options.GroupBy}
	for i, r := range d.Runs {
		ri := RunInfo{Index: i, Dir: r.Dir, Status: r.Status, Live: r.Live}
		for _, k := range slices.Sorted(maps.Keys(r.Manifest)) {
			b, _ := json.Marshal(r.Manifest[k])
			v := string(b)
			if s, ok := r.Manifest[k].(string); ok {
				v = s
			}
			if m, ok := r.Manifest[k].(map[string]any); ok { // one level down: config's settings
				for _, k2 := range slices.Sorted(maps.Keys(m)) {
					b, _ := json.Marshal(m[k2])
					ri.Settings = append(ri.Settings, Setting{k + "." + k2, string(b)})
				}
				continue
			}
			ri.Settings = append(ri.Settings, Setting{k, v})
		}
		o.Runs = append(o.Runs, ri)
	}
	o.Overall = scoreRow(&e.Overall, l.rollouts(AllRollouts()))
	o.Overall.Scope = "all"
	for i := range e.ByArm {
		o.Arms = append(o.Arms, scoreRow(&e.ByArm[i], l.rollouts(allWith(func(q *Query) { q.Arm = e.ByArm[i].Arm }))))
	}
	for i := range e.ByGroup {
		o.Groups = append(o.Groups, scoreRow(&e.ByGroup[i], l.rollouts(allWith(func(q *Query) { q.Group = e.ByGroup[i].Group }))))
	}
	armLabel := func(s *report.Scores) string {
		if s.Arm != "" && s.Group == "" {
			return s.Arm
		}
		return s.Scope
	}
	o.ArmCI = newCIChart("ci-arms", e.ByArm, armLabel)
	if len(e.ByGroup) > 0 {
		o.GroupCI = newCIChart("ci-groups", e.ByGroup, armLabel)
		o.ArmGroupCI = newCIChart("ci-arm-groups", e.ByArmGroup, armLabel)
	}
	o.PassAt = newPassChart("pass-at-k", "pass@k", e.ByArm, false)
	o.PassHat = newPassChart("pass-hat-k", "pass^k", e.ByArm, true)
	o.Terminations = newStackChart("terminations", e.ByArm, func(s *report.Scores) map[string]int { return s.Terminations }, "no terminations recorded")
	o.Failures = newStackChart("failures", e.ByArm, func(s *report.Scores) map[string]int {
		m := maps.Clone(s.FailuresByClass)
		if ok := s.Rollouts - s.Failed; ok > 0 {
			if m == nil {
				m = map[string]int{}
			}
			m["(no failure)"] = ok
		}
		return m
	}, "no rollouts")
	cols := []struct {
		id, title string
		whole     bool
		v         func(r *row) float64
	}{
		{"hist-rounds", "rounds", true, func(r *row) float64 { return float64(r.rounds) }},
		{"hist-tool-calls", "tool calls", true, func(r *row) float64 { return float64(r.toolCalls) }},
		{"hist-tokens", "tokens", true, func(r *row) float64 { return float64(r.prompt + r.compl) }},
		{"hist-latency", "latency (ms)", false, func(r *row) float64 { return r.latencyMs }},
	}
	vals := make([]float64, len(d.rows))
	for _, c := range cols {
		for i := range d.rows {
			vals[i] = c.v(&d.rows[i])
		}
		o.Hists = append(o.Hists, newHistogram(c.id, c.title, vals, c.whole))
	}
	o.FailedLink = l.rollouts(allWith(func(q *Query) { q.Sort, q.Desc = "failure", true }))
	o.Board, o.BoardMethod = d.board(l)
	for _, p := range d.defaultPairs() {
		if u := l.compare(p[0], p[1]); u != "" {
			o.Compares = append(o.Compares, Link{Label: d.sideName(p[0]) + " vs " + d.sideName(p[1]), URL: u})
		}
	}
	return o
}

// Side is one side of a comparison: a run, and one arm of it or all ("").
type Side struct {
	Run int
	Arm string
}

func (s Side) String() string {
	if s.Arm == "" {
		return strconv.Itoa(s.Run)
	}
	return strconv.Itoa(s.Run) + ":" + s.Arm
}

// parseSide reads "RUN" or "RUN:ARM".
func parseSide(s string, runs int) (Side, error) {
	r, arm, _ := strings.Cut(s, ":")
	n, err := strconv.Atoi(r)
	if err != nil || n < 0 || n >= runs {
		return Side{}, fmt.Errorf("%q: want RUN or RUN:ARM, RUN from 0 to %d", s, runs-1)
	}
	return Side{Run: n, Arm: arm}, nil
}

func (d *Data) sideName(s Side) string {
	name := s.Arm
	if len(d.Runs) > 1 {
		name = d.Runs[s.Run].Dir
		if s.Arm != "" {
			name += " " + s.Arm
		}
	}
	if name == "" {
		name = "all"
	}
	return name
}

// runArms are the arms of one run, sorted.
func (d *Data) runArms(run int) []string {
	set := map[uint32]bool{}
	for i := range d.rows {
		if int(d.rows[i].run) == run {
			set[d.rows[i].arm] = true
		}
	}
	var out []string
	for a := range set {
		out = append(out, d.s.get(a))
	}
	slices.Sort(out)
	return out
}

// defaultPairs are the comparisons the overview offers: each later arm of a run against its
// first, and each later run against the first (arm by arm when they share arms).
func (d *Data) defaultPairs() [][2]Side {
	var out [][2]Side
	first := d.runArms(0)
	for run := range d.Runs {
		arms := d.runArms(run)
		for _, a := range arms[min(1, len(arms)):] {
			out = append(out, [2]Side{{run, arms[0]}, {run, a}})
		}
		if run == 0 || !d.shareTasks(0, run) {
			continue // runs of different task files have nothing to pair
		}
		shared := 0
		for _, a := range arms {
			if slices.Contains(first, a) {
				out = append(out, [2]Side{{0, a}, {run, a}})
				shared++
			}
		}
		if shared == 0 {
			out = append(out, [2]Side{{0, ""}, {run, ""}})
		}
	}
	return out
}

// shareTasks says whether run b has a task in common with run a: a task id or row hash (or,
// for records with neither, a task index) both have. Load computes it against the first run.
func (d *Data) shareTasks(a, b int) bool {
	if a == 0 && b < len(d.sharesFirst) {
		return d.sharesFirst[b]
	}
	type key struct {
		s     uint32
		index int64
	}
	keyOf := func(r *row) key {
		switch {
		case d.s.get(r.id) != "":
			return key{r.id, -1}
		case d.s.get(r.hash) != "":
			return key{r.hash, -2}
		}
		return key{0, r.task}
	}
	keys := map[key]bool{}
	for i := range d.rows {
		if int(d.rows[i].run) == a {
			keys[keyOf(&d.rows[i])] = true
		}
	}
	for i := range d.rows {
		if int(d.rows[i].run) == b && keys[keyOf(&d.rows[i])] {
			return true
		}
	}
	return false
}

// keyOrder sorts the rows by key once, for lookups of one rollout or one task.
func (d *Data) keyOrder() []int32 {
	d.keysOnce.Do(func() {
		d.keys = make([]int32, len(d.rows))
		for i := range d.keys {
			d.keys[i] = int32(i)
		}
		slices.SortFunc(d.keys, func(i, j int32) int {
			a, b := &d.rows[i], &d.rows[j]
			return cmp.Or(cmp.Compare(a.run, b.run), cmp.Compare(a.task, b.task), cmp.Compare(a.rollout, b.rollout),
				strings.Compare(d.s.get(a.arm), d.s.get(b.arm)), cmp.Compare(i, j))
		})
	})
	return d.keys
}

// taskRows are the rows of one task of one run, in key order.
func (d *Data) taskRows(run int, task int64) []int32 {
	keys := d.keyOrder()
	lo := sort.Search(len(keys), func(i int) bool {
		r := &d.rows[keys[i]]
		return int(r.run) > run || int(r.run) == run && r.task >= task
	})
	hi := lo
	for hi < len(keys) && int(d.rows[keys[hi]].run) == run && d.rows[keys[hi]].task == task {
		hi++
	}
	return keys[lo:hi]
}

// find returns the row of a rollout (-1 when there is none).
func (d *Data) find(k Key) int {
	for _, i := range d.taskRows(k.Run, k.Task) {
		if r := &d.rows[i]; r.rollout == k.Rollout && d.s.get(r.arm) == k.Arm {
			return int(i)
		}
	}
	return -1
}

func (d *Data) key(i int) Key {
	r := &d.rows[i]
	return Key{Run: int(r.run), Task: r.task, Rollout: r.rollout, Arm: d.s.get(r.arm)}
}

// TableRow is a row of the rollouts table.
type TableRow struct {
	Key                       Key
	TaskID, Arm, Run          string
	Reward, Term, Fail, Group string
	Endpoint                  string
	Rounds, ToolCalls         int32
	Tokens                    int64
	Latency                   string
	Link                      string
	Failed, Scored, Positive  bool
}

func (d *Data) tableRow(i int, l linker) TableRow {
	r := &d.rows[i]
	t := TableRow{Key: d.key(i), TaskID: d.s.get(r.id), Arm: d.s.get(r.arm), Run: strconv.Itoa(int(r.run)), Reward: "-",
		Term: d.s.get(r.term), Fail: d.s.get(r.fail), Endpoint: d.s.get(r.endpoint), Rounds: r.rounds, ToolCalls: r.toolCalls, Tokens: r.prompt + r.compl,
		Latency: strconv.FormatFloat(r.latencyMs, 'f', 0, 64)}
	if t.TaskID == "" {
		t.TaskID = "#" + strconv.FormatInt(r.task, 10)
	}
	if d.groupField != "" {
		t.Group = d.group(i)
	}
	if r.hasReward && t.Fail == "" {
		t.Reward, t.Scored, t.Positive = num(r.reward), true, r.reward > 0
	}
	t.Failed = t.Fail != ""
	t.Link = l.trajectory(t.Key)
	return t
}

// Transcript is one rollout's page: its record and its messages.
type Transcript struct {
	Key                    Key
	Found                  bool // the record exists
	TaskID, Source         string
	Reward, Components     string
	Scored                 bool
	Term, Fail, Error      string
	Endpoint               string
	Rounds, ToolCalls      int32
	Prompt, Completion     int64
	Latency                string
	Messages               []Message
	NoTrajectory           string // why there is no transcript
	TrajError, TrajFailure string
	Siblings               []Link
	SiblingsOfTask         string
	Anchor                 string // the report's anchor of this transcript
}

// Message is one message of a transcript.
type Message struct {
	N          int
	Role       string
	Name       string
	Content    string
	Folded     bool   // long: shown folded
	Head       string // the start of a folded content
	Reasoning  string
	Calls      []Call
	Round      string // the round's latency and usage, for an assistant message
	Tokens     string // the round's captured token ids (--capture-tokens): their counts
	TokenNote  string // what the endpoint did not return of them
	ToolStatus string // a tool message's call: status and latency
}

// Call is a tool call an assistant message asked for.
type Call struct{ ID, Name, Arguments string }

// foldAt is the length past which a message is folded.
const foldAt = 1200

func fold(s string) (head string, folded bool) {
	if len(s) <= foldAt && strings.Count(s, "\n") <= 24 {
		return "", false
	}
	h := s
	if i := strings.IndexByte(h, '\n'); i > 0 && i < 300 {
		h = h[:i]
	}
	return record.Clip(h, 300), true
}

// transcript reads one rollout's page; a trajectory that cannot be read is said on the page.
func (d *Data) transcript(k Key, l linker) (*Transcript, error) {
	t := &Transcript{Key: k}
	i := d.find(k)
	if i < 0 {
		return t, nil
	}
	r := &d.rows[i]
	t.Found, t.TaskID, t.Source = true, d.s.get(r.id), d.s.get(r.src)
	t.Term, t.Fail, t.Error, t.Endpoint = d.s.get(r.term), d.s.get(r.fail), d.s.get(r.err), d.s.get(r.endpoint)
	t.Rounds, t.ToolCalls, t.Prompt, t.Completion = r.rounds, r.toolCalls, r.prompt, r.compl
	t.Latency = strconv.FormatFloat(r.latencyMs, 'f', 1, 64)
	t.Reward, t.Components = "-", d.s.get(r.comps)
	if r.hasReward && t.Fail == "" {
		t.Reward, t.Scored = exact(r.reward), true
	}
	t.SiblingsOfTask = t.TaskID
	for _, j := range d.taskRows(k.Run, k.Task) {
		if int(j) == i {
			continue
		}
		sk := d.key(int(j))
		if u := l.trajectory(sk); u != "" {
			label := fmt.Sprintf("repeat %d · %s", sk.Rollout, sk.Arm)
			if d.rows[j].hasReward && d.s.get(d.rows[j].fail) == "" {
				label += " · reward " + num(d.rows[j].reward)
			} else {
				label += " · " + d.s.get(d.rows[j].fail)
			}
			t.Siblings = append(t.Siblings, Link{Label: label, URL: u})
		}
	}
	// Read as it streams, with each long text cut (its size noted): a page costs what it shows,
	// not the line.
	raw, ok, err := d.Runs[k.Run].trajs.Clipped(k.Task, k.Rollout, k.Arm, rundir.MaxShownString)
	var tooLong *rundir.LineTooLongError
	if errors.As(err, &tooLong) {
		t.NoTrajectory = fmt.Sprintf("its line in trajectories.jsonl, with each text cut at %d bytes, is still longer than %d bytes, more than the viewer reads", rundir.MaxShownString, tooLong.Limit)
		return t, nil
	}
	var malformed *rundir.MalformedLineError
	if errors.As(err, &malformed) {
		t.NoTrajectory = fmt.Sprintf("its line in trajectories.jsonl cannot be read: %v", err)
		return t, nil
	}
	if err != nil {
		return nil, err
	}
	if !ok {
		t.NoTrajectory = "the rollout has no line in trajectories.jsonl"
		return t, nil
	}
	var tl struct{ Trajectory *agent.Trajectory }
	if err := json.Unmarshal(raw, &tl.Trajectory); err != nil {
		t.NoTrajectory = fmt.Sprintf("its line in trajectories.jsonl cannot be read: %v", err)
		return t, nil
	}
	if tl.Trajectory == nil {
		t.NoTrajectory = "the rollout ended before it had a transcript"
		return t, nil
	}
	tr := tl.Trajectory
	t.TrajError, t.TrajFailure = tr.Error, string(tr.FailureClass)
	calls := map[string]agent.ToolCall{}
	for _, rd := range tr.Rounds {
		for _, c := range rd.ToolCalls {
			calls[c.CallID] = c
		}
	}
	assistant := 0
	for n, m := range tr.Messages {
		msg := Message{N: n, Role: m.Role, Name: m.Name, Content: m.Content, Reasoning: m.ReasoningContent}
		for _, p := range m.MultiContent {
			if p.Text != "" {
				if msg.Content != "" {
					msg.Content += "\n"
				}
				msg.Content += p.Text
			}
		}
		msg.Head, msg.Folded = fold(msg.Content)
		for _, c := range m.ToolCalls {
			msg.Calls = append(msg.Calls, Call{ID: c.ID, Name: c.Function.Name, Arguments: prettyJSON(c.Function.Arguments)})
		}
		switch m.Role {
		case "assistant":
			if assistant < len(tr.Rounds) {
				rd := tr.Rounds[assistant]
				msg.Round = fmt.Sprintf("round %d · model %.1f ms · %d prompt + %d completion tokens · finish %s",
					rd.Index+1, rd.ModelLatencyMs, rd.Usage.PromptTokens, rd.Usage.CompletionTokens, orDash(rd.FinishReason))
				if rd.Endpoint != "" {
					msg.Round += " · endpoint " + rd.Endpoint
				}
				msg.Tokens, msg.TokenNote = roundTokens(&rd), rd.TokenNote
			}
			assistant++
		case "tool":
			if c, ok := calls[m.ToolCallID]; ok {
				msg.Name = c.Name
				msg.ToolStatus = fmt.Sprintf("%s · %.1f ms", c.StatusText(), c.LatencyMs)
			}
		}
		t.Messages = append(t.Messages, msg)
	}
	return t, nil
}

// roundTokens counts a round's captured tokens ("" when none were captured): the arrays
// themselves stay in trajectories.jsonl.
func roundTokens(rd *agent.Round) string {
	if rd.PromptTokenIDs == nil && rd.GenerationTokenIDs == nil && rd.GenerationLogProbs == nil {
		return ""
	}
	count := func(n int, present bool) string {
		if !present {
			return "missing"
		}
		return strconv.Itoa(n)
	}
	return fmt.Sprintf("token ids: %s prompt, %s generation · %s log-probs",
		count(len(rd.PromptTokenIDs), rd.PromptTokenIDs != nil), count(len(rd.GenerationTokenIDs), rd.GenerationTokenIDs != nil),
		count(len(rd.GenerationLogProbs), rd.GenerationLogProbs != nil))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// prettyJSON indents a JSON text (arguments), or returns it as it is.
func prettyJSON(s string) string {
	var b bytes.Buffer
	if json.Indent(&b, []byte(s), "", "  ") != nil {
		return s
	}
	return b.String()
}

// Comparison is the compare page's data.
type Comparison struct {
	A, B             Side
	NameA, NameB     string
	C                *report.Comparison
	Diff, CI, StdErr string
	Scatter          *Scatter
	Flipped          []Flip
	FlippedMore      int
	Sides            []Link // other comparisons
	JSON             string
	Anchor           string // the report's anchor of this comparison
}

// Flip is a task whose mean reward differs between the sides.
type Flip struct {
	Task         string
	A, B, Diff   string
	Won          bool
	Link         string
	LinkA, LinkB string
}

// Scatter plots each task's mean reward on side A (x) against side B (y).
type Scatter struct {
	Width, Height, Left, Right, Top, Bottom float64
	Points                                  []Mark
	Ticks                                   []Tick
	YTicks                                  []Tick
	Diag                                    [4]float64
	Shown, Tasks                            int
}

// maxFlips and maxPoints bound the compare page at scale.
const maxFlips, maxPoints = 200, 5000

// sideRows are the row numbers of one side.
func (d *Data) sideRows(s Side) []int {
	var out []int
	for i := range d.rows {
		if int(d.rows[i].run) == s.Run && (s.Arm == "" || d.s.get(d.rows[i].arm) == s.Arm) {
			out = append(out, i)
		}
	}
	return out
}

func (d *Data) comparison(a, b Side, l linker) *Comparison {
	o := d.Evaluation.Options
	rows := [2][]int{d.sideRows(a), d.sideRows(b)}
	c := &Comparison{A: a, B: b, NameA: d.sideName(a), NameB: d.sideName(b)}
	// report.Compare's numbers from the table, a record at a time in two passes: no side's
	// records are held, only the comparer's per-rollout keys (the table's strings), rewards and
	// positions.
	cp := report.NewComparer(c.NameA, c.NameB, o)
	for s := range rows {
		cp.Reserve(s, len(rows[s]))
	}
	for pass := range 2 {
		for s := range rows {
			for _, i := range rows[s] {
				r := d.record(i)
				if pass == 0 {
					cp.Check(s, &r)
				} else {
					cp.Add(s, &r)
				}
			}
		}
	}
	c.C = cp.Comparison()
	c.Diff, c.StdErr, c.CI = num(c.C.MeanDiff), num(c.C.StdErr), "-"
	if c.C.CI95 != nil {
		c.CI = num(c.C.CI95.Low) + " to " + num(c.C.CI95.High)
	}
	var js bytes.Buffer
	if c.C.WriteJSON(&js) == nil {
		c.JSON = js.String()
	}
	// Each task's paired rewards, as Compare pairs them, and the rows of its lowest paired repeat.
	tasks := cp.Tasks()
	sc := &Scatter{Width: 360, Height: 360, Left: 44, Right: 344, Top: 12, Bottom: 312, Tasks: len(tasks)}
	lo, hi := 0.0, 1.0
	for _, t := range tasks {
		lo = min(lo, t.MeanA, t.MeanB)
		hi = max(hi, t.MeanA, t.MeanB)
	}
	x := linear{lo, hi, sc.Left, sc.Right}
	y := linear{lo, hi, sc.Bottom, sc.Top}
	sc.Ticks, sc.YTicks = x.ticks(5), y.ticks(5)
	sc.Diag = [4]float64{x.at(lo), y.at(lo), x.at(hi), y.at(hi)}
	// Tasks at the same point (rewards of 0 and 1 make few points) are one dot, sized by
	// their number.
	type at struct{ a, b float64 }
	dots := map[at]int{}
	var order []at
	// The changed tasks: an index into tasks, and the change as the page shows it (rounded),
	// which orders them.
	type change struct {
		j    int
		diff float64
	}
	var flipped []change
	for j, t := range tasks {
		p := at{t.MeanA, t.MeanB}
		if dots[p] == 0 {
			order = append(order, p)
		}
		dots[p]++
		if t.MeanA != t.MeanB {
			diff, _ := strconv.ParseFloat(num(t.MeanB-t.MeanA), 64)
			flipped = append(flipped, change{j, diff})
		}
	}
	for _, p := range order {
		if len(sc.Points) == maxPoints {
			break
		}
		n := dots[p]
		sc.Points = append(sc.Points, Mark{X: x.at(p.a), Y: y.at(p.b), R: min(3+2*math.Sqrt(float64(n)), 14), N: n,
			Title: fmt.Sprintf("%d task(s): %s %s, %s %s", n, c.NameA, num(p.a), c.NameB, num(p.b))})
		sc.Shown += n
	}
	c.Scatter = sc
	// The largest changes first (ties in key order); links only for those listed.
	slices.SortStableFunc(flipped, func(p, q change) int { return cmp.Compare(math.Abs(q.diff), math.Abs(p.diff)) })
	if len(flipped) > maxFlips {
		c.FlippedMore = len(flipped) - maxFlips
		flipped = flipped[:maxFlips]
	}
	flips := make([]Flip, 0, len(flipped))
	for _, f := range flipped {
		t := &tasks[f.j]
		ka, kb := d.key(rows[0][t.First[0]]), d.key(rows[1][t.First[1]])
		flips = append(flips, Flip{Task: display(t.Key), A: num(t.MeanA), B: num(t.MeanB), Diff: num(t.MeanB - t.MeanA), Won: t.MeanB > t.MeanA,
			Link: l.pair(ka, kb), LinkA: l.trajectory(ka), LinkB: l.trajectory(kb)})
	}
	c.Flipped = flips
	for _, p := range d.defaultPairs() {
		if p[0] != a || p[1] != b {
			if u := l.compare(p[0], p[1]); u != "" {
				c.Sides = append(c.Sides, Link{Label: d.sideName(p[0]) + " vs " + d.sideName(p[1]), URL: u})
			}
		}
	}
	return c
}

// display is a task key for people: the id, else what it is.
func display(key string) string {
	if id, ok := strings.CutPrefix(key, "id:"); ok {
		return id
	}
	return key
}

// lazy holds what is computed once per Data.
type lazy struct {
	keysOnce sync.Once
	keys     []int32
}
