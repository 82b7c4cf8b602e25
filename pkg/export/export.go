// Package export turns run directories into training data: one file in one of four formats,
// Parquet or JSONL by the output's extension.
//
//   - rl: one row per rollout: its task, group (the task: all its repeats and arms), repeat,
//     arm, reward and components, the group-normalized advantage (r − mean) / (std + ε) with
//     the sample standard deviation of the group's rewards, and r − mean; the messages, the
//     tools and, when the run captured them, each model call's token arrays.
//   - sft: chat fine-tuning rows, {"messages": [...], "tools": "..."} as chat templates render
//     them; or OpenAI's fine-tuning format (LayoutOpenAI), the conversation rendered by the
//     model's chat template with the answers' spans and token ids (LayoutText), verl's
//     multi-turn SFT file checked against the template (LayoutVerl).
//   - preference: per task, chosen = a highest-reward rollout, rejected = a lowest-reward one,
//     in the shape TRL's DPO trainer reads (prompt, chosen, rejected as message lists).
//   - nemo-gym: the rollouts as NeMo Gym's ng_collect_rollouts writes them: the row's
//     responses_create_params, the response (Responses API output items; each model call's
//     tokens on its last item when captured), the reward and its components.
//
// Each directory is read in turn: its journal twice (the group statistics first, then the
// rows), its trajectories and its task file once, in order, so that memory is bounded by the
// number of tasks (one set of numbers each), not of rollouts. Failed rollouts (infrastructure
// failures) are left out unless IncludeFailed (then with reward 0); bad_task rows always.
package export

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// Formats.
const (
	FormatRL         = "rl"
	FormatSFT        = "sft"
	FormatPreference = "preference"
	FormatNemoGym    = "nemo-gym"
	FormatVerl       = "verl"
)

// Formats lists the formats, for help texts.
var Formats = []string{FormatRL, FormatSFT, FormatPreference, FormatNemoGym, FormatVerl}

// Epsilon is the ε of the normalized advantage.
const Epsilon = 1e-6

// Options say what to export.
type Options struct {
	Dirs   []string // run directories (shards of one run, or runs of the same tasks)
	Format string
	Output string // .parquet or .jsonl
	// Input is the task file, when not the one in each directory's manifest.
	Input string
	// Arm keeps one arm's rollouts ("" for all).
	Arm string
	// DropUniformGroups (rl): leave out groups whose rewards are all equal.
	DropUniformGroups bool
	// MinReward (sft): leave out rollouts with a lower reward (nil: none).
	MinReward *float64
	// BestOfGroup (sft): keep only the highest-reward rollout of each task.
	BestOfGroup bool
	// MinMargin (preference): the least difference between chosen and rejected rewards
	// (pairs of equal rewards are never made).
	MinMargin float64
	// IncludeFailed keeps failed rollouts (infrastructure failures), with reward 0.
	IncludeFailed bool
	// Layout (preference): LayoutTRL (default: prompt, chosen, rejected) or LayoutNemoRL
	// (context, completions).
	Layout string
	// PoolArms makes a group of all of a task's rollouts, whatever their arm; by default a
	// group is one task's rollouts under one arm (one policy).
	PoolArms bool
	// Overwrite replaces an existing Output; without it an existing file is refused.
	Overwrite bool
	// ChatTemplate (sft, LayoutText and LayoutVerl) is the model's chat template: a Jinja file or a Hugging
	// Face tokenizer_config.json.
	ChatTemplate string
	// MaxRowBytes bounds the trajectory line a row is made from (0: DefaultMaxRowBytes): a
	// longer line is read past without being held, and its rollout left out, named on Warnings.
	MaxRowBytes int64
	// Warnings gets a line for each rollout left out for its size (nil: none).
	Warnings io.Writer
}

// DefaultMaxRowBytes is the default of Options.MaxRowBytes.
const DefaultMaxRowBytes = 64 << 20

// An InputError is a task file that cannot be the runs' (missing, another file's bytes, a
// malformed row a record needs), or an output that would write over what the export reads:
// a usage error, not a failure of the export.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// Report is what an export kept and dropped, and why.
type Report struct {
	Format  string
	Layout  string
	Output  string
	Read    int            // records read
	Rows    int            // rows written
	Kept    int            // rollouts in the rows
	Dropped map[string]int // rollouts left out, by reason
	Groups  int            // groups (tasks) among the rollouts considered
	// UniformGroups is the number of groups whose rewards are all equal.
	UniformGroups int
	// GroupsDropped is the number of groups left out, by reason (preference, rl).
	GroupsDropped map[string]int
	// MissingPromptIDs counts model calls with generation tokens but no prompt ids.
	MissingPromptIDs int
	// DuplicateKeys counts rollouts whose key (task, repeat, arm) an earlier run directory
	// of the export had too: runs of the same tasks, pooled in the same groups.
	DuplicateKeys int
	// NonContiguous counts exported rollouts with a model call whose prompt ids do not begin
	// with the previous call's prompt and generated ids (NeMo RL refuses them).
	NonContiguous int
}

// Reasons a rollout or group is left out.
const (
	DropBadTask      = "bad_task row"
	DropFailed       = "failed rollout (infrastructure; --include-failed keeps them)"
	DropArm          = "other arm"
	DropUniform      = "group with all rewards equal (--drop-uniform-groups)"
	DropMinReward    = "reward below --min-reward"
	DropNotBest      = "not the best of its group (--best-of-group)"
	DropNoTrajectory = "no trajectory in trajectories.jsonl"
	DropTooLarge     = "a line longer than --max-row-bytes (each named above)"
	DropNoTask       = "no row in the task file"
	DropNoPair       = "group with one rollout"
	DropEqual        = "group with all rewards equal"
	DropMargin       = "best − worst below --min-margin"
	DropPaired       = "neither chosen nor rejected"
	DropNoAnswer     = "no model answer in the trajectory"
	DropTruncated    = "a model answer cut off by the token limit (finish_reason length)"
	DropSameAnswers  = "chosen and rejected took the same turns"
	DropTaskWritten  = "another rollout of a task already written (verl: one row per task)"
	DropEnvironment  = "chosen and rejected first differ in a tool's or user's message, not the model's"
	DropMalformed    = "tool-call arguments that are not a JSON object"
	DropNotPrefix    = "the chat template does not render the conversation up to an answer as the beginning of the whole (no answer span)"
	DropFloat        = "a number the Go template renderer writes otherwise than Python's json.dumps (an integral or large float)"
)

// group is the statistics of one task's rollouts (Welford's running mean and M2).
type group struct {
	n                int
	mean, m2         float64
	min, max         float64
	best, worst      record.Key
	bestDir, worstDr int
}

func (g *group) add(r float64, k record.Key, dir int) {
	g.n++
	d := r - g.mean
	g.mean += d / float64(g.n)
	g.m2 += d * (r - g.mean)
	if g.n == 1 || r > g.max {
		g.max, g.best, g.bestDir = r, k, dir
	}
	if g.n == 1 || r < g.min {
		g.min, g.worst, g.worstDr = r, k, dir
	}
}

// std is the sample standard deviation of the group's rewards (0 for one rollout).
func (g *group) std() float64 {
	if g.n < 2 {
		return 0
	}
	return math.Sqrt(g.m2 / float64(g.n-1))
}

func (g *group) uniform() bool { return g.max == g.min }

// Check reports the first option that cannot work: no directory or output, an unknown
// format or output extension, a negative margin.
func (opt *Options) Check() error {
	if len(opt.Dirs) == 0 {
		return errors.New("no run directory")
	}
	if opt.MaxRowBytes < 0 {
		return fmt.Errorf("--max-row-bytes %d: want a number of bytes from 1", opt.MaxRowBytes)
	}
	switch opt.Format {
	case FormatRL, FormatSFT, FormatPreference, FormatNemoGym, FormatVerl:
	default:
		return fmt.Errorf("--format %q: want one of %s", opt.Format, strings.Join(Formats, ", "))
	}
	if opt.Output == "" {
		return errors.New("no output file (-o)")
	}
	if _, err := fileKind(opt.Output); err != nil {
		return err
	}
	switch opt.Layout {
	case "", LayoutTRL:
	case LayoutNemoRL:
		if opt.Format != FormatPreference {
			return fmt.Errorf("--layout %s is a layout of --format preference", opt.Layout)
		}
	case LayoutText, LayoutVerl:
		if opt.Format != FormatSFT {
			return fmt.Errorf("--layout %s is a layout of --format sft", opt.Layout)
		}
		if opt.ChatTemplate == "" {
			return fmt.Errorf("--layout %s renders each conversation with the model's chat template: give it with --chat-template FILE (a .jinja file or the model's tokenizer_config.json)", opt.Layout)
		}
		if _, err := LoadChatTemplate(opt.ChatTemplate); err != nil {
			return err
		}
	case LayoutOpenAI:
		if opt.Format != FormatPreference && opt.Format != FormatSFT {
			return fmt.Errorf("--layout %s is a layout of --format sft and preference", opt.Layout)
		}
		if kind, _ := fileKind(opt.Output); kind != "jsonl" {
			return fmt.Errorf("--layout %s: -o %s: OpenAI's fine-tuning files are JSONL (.jsonl)", opt.Layout, opt.Output)
		}
	default:
		return fmt.Errorf("--layout %q: want %s, %s, %s, %s or %s", opt.Layout, LayoutTRL, LayoutNemoRL, LayoutOpenAI, LayoutText, LayoutVerl)
	}
	if opt.ChatTemplate != "" && opt.Layout != LayoutText && opt.Layout != LayoutVerl {
		return fmt.Errorf("--chat-template is for --format sft --layout %s or %s", LayoutText, LayoutVerl)
	}
	if opt.MinMargin < 0 {
		return fmt.Errorf("--min-margin %g: must be at least 0", opt.MinMargin)
	}
	reads := rundir.ReadsOf(opt.Dirs...)
	if opt.Input != "" {
		reads = append(reads, rundir.Read{Path: opt.Input, What: "the input"})
	}
	if opt.ChatTemplate != "" {
		reads = append(reads, rundir.Read{Path: opt.ChatTemplate, What: "the chat template"})
	}
	if err := rundir.CheckOutput(rundir.Output{Flag: "-o", Path: opt.Output}, reads...); err != nil {
		return err
	}
	if _, err := os.Stat(opt.Output); err == nil && !opt.Overwrite {
		return fmt.Errorf("-o %s already exists; pass --overwrite to replace it, or choose another file", opt.Output)
	}
	return nil
}

// checkInput checks that opt.Input, when set, is each run's task file: it can be read, and
// its bytes are the ones in the run's manifest (when the manifest has their hash).
func (opt *Options) checkInput() error {
	if opt.Input == "" {
		return checkManifestInputs(opt.Dirs)
	}
	sum, err := rundir.HashFile(opt.Input)
	if err != nil {
		return &InputError{fmt.Errorf("--input: %w", err)}
	}
	for _, dir := range opt.Dirs {
		m, err := rundir.ReadManifest(dir)
		if err != nil || m.InputSHA256 == "" {
			continue
		}
		if m.InputSHA256 != sum {
			return &InputError{fmt.Errorf("--input %s is not the task file of %s: its sha256 is %.12s, the run's input %s had %.12s",
				opt.Input, dir, sum, m.Input, m.InputSHA256)}
		}
	}
	return nil
}

// checkManifestInputs checks that each run's task file, as its manifest names it, still holds
// the bytes the run read (the manifest's sha256): a task file generated again, with another
// seed, would join the run's rollouts to other tasks' prompts and tools.
func checkManifestInputs(dirs []string) error {
	for _, dir := range dirs {
		m, err := rundir.ReadManifest(dir)
		if err != nil {
			continue // openTasks says what is wrong
		}
		if sum, known := m.InputNow(); known && sum != m.InputSHA256 {
			return &InputError{fmt.Errorf("%s: the run's task file %s has changed since the run: its sha256 is now %s, the run read %s (give the run's task file with --input)",
				dir, m.Input, sum, m.InputSHA256)}
		}
	}
	return nil
}

// Run exports opt.Dirs to opt.Output.
func Run(ctx context.Context, opt Options) (*Report, error) {
	if err := opt.Check(); err != nil {
		return nil, &InputError{err}
	}
	if err := opt.checkInput(); err != nil {
		return nil, err
	}
	e := &exporter{opt: opt, groups: map[groupKey]*group{}, arms: map[string]int{},
		rep: &Report{Format: opt.Format, Layout: opt.Layout, Output: opt.Output, Dropped: map[string]int{}, GroupsDropped: map[string]int{}}}
	if err := e.statistics(ctx); err != nil {
		return nil, err
	}
	var err error
	switch opt.Format {
	case FormatRL:
		err = runRows(ctx, e, e.rlRow)
	case FormatSFT:
		switch opt.Layout {
		case LayoutOpenAI:
			err = e.openaiSFT(ctx)
		case LayoutText, LayoutVerl:
			if e.template, err = LoadChatTemplate(opt.ChatTemplate); err != nil {
				return nil, &InputError{err}
			}
			switch {
			case opt.Layout == LayoutText && capturedTokens(opt.Dirs):
				err = runRows(ctx, e, e.tokenTextRow)
			case opt.Layout == LayoutText:
				err = runRows(ctx, e, e.textRow)
			default:
				err = runRows(ctx, e, e.verlSFTRow)
			}
		default:
			err = runRows(ctx, e, e.sftRow)
		}
	case FormatNemoGym:
		err = runRows(ctx, e, e.nemoGymRow)
	case FormatPreference:
		err = e.preference(ctx)
	case FormatVerl:
		err = e.verlRows(ctx)
	}
	if err != nil {
		return nil, err
	}
	return e.rep, nil
}

type exporter struct {
	opt    Options
	groups map[groupKey]*group
	// arms is each exported arm's index among them (sorted by name), maxRepeat the highest
	// repeat: nemo-gym keys each arm's rollouts apart with them.
	arms      map[string]int
	maxRepeat int64
	need      []map[int64]int // per directory: how many exported rollouts need each task row
	rep       *Report
	template  *ChatTemplate  // sft --layout text and verl
	verl      *verlPromptsOf // sft --layout verl: the template's prompts as verl finds them
}

// eligible says why a record is left out of every format ("" when it is not).
func (e *exporter) eligible(r *record.Record) string {
	switch {
	case r.FailureClass == record.FailBadTask:
		return DropBadTask
	case r.FailureClass != "" && !e.opt.IncludeFailed:
		return DropFailed
	case e.opt.Arm != "" && r.Arm != e.opt.Arm:
		return DropArm
	}
	return ""
}

// statistics is the first pass: every group's rewards, and the rows each directory needs.
func (e *exporter) statistics(ctx context.Context) error {
	e.need = make([]map[int64]int, len(e.opt.Dirs))
	var seen map[uint64]bool // the keys of the directories read so far, when there are several
	if len(e.opt.Dirs) > 1 {
		seen = map[uint64]bool{}
	}
	for d, dir := range e.opt.Dirs {
		need := map[int64]int{}
		e.need[d] = need
		err := rundir.ReadJournal(dir, func(r *record.Record) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			e.rep.Read++
			if e.eligible(r) != "" {
				return nil
			}
			gk := e.groupOf(r)
			g := e.groups[gk]
			if g == nil {
				g = &group{}
				e.groups[gk] = g
			}
			if seen != nil {
				h := keyHash(r.Key())
				if d > 0 && seen[h] {
					e.rep.DuplicateKeys++
				}
				seen[h] = true
			}
			g.add(r.Reward, r.Key(), d)
			need[r.TaskIndex]++
			if _, ok := e.arms[r.Arm]; !ok {
				e.arms[r.Arm] = 0
			}
			e.maxRepeat = max(e.maxRepeat, r.RolloutIndex)
			return nil
		})
		if err != nil {
			return err
		}
	}
	names := sortedKeys(e.arms)
	for i, a := range names {
		e.arms[a] = i
	}
	e.rep.Groups = len(e.groups)
	for _, g := range e.groups {
		if g.uniform() {
			e.rep.UniformGroups++
		}
	}
	if e.opt.Format == FormatRL && e.opt.DropUniformGroups && e.rep.UniformGroups > 0 {
		e.rep.GroupsDropped[DropUniform] = e.rep.UniformGroups
	}
	return nil
}

// rollout is what the second pass hands a format: a record with its trajectory and row.
type rollout struct {
	dir    int
	rec    *record.Record
	traj   *storedTrajectory
	task   *dataset.Task
	g      *group
	verify json.RawMessage // nemo-gym: the run's NeMo Gym line, when it kept them (--jsonl-out)
}

// each is the second pass: for each directory in turn, every eligible record in journal
// order with its group, trajectory and task row, to fn; fn's drop reason ("" when it keeps
// the rollout) is counted. filter, when set, says before the trajectory is read whether the
// rollout is left out.
func (e *exporter) each(ctx context.Context, filter func(*record.Record, *group) string, fn func(*rollout) (string, error)) error {
	for d, dir := range e.opt.Dirs {
		over := cmp.Or(e.opt.MaxRowBytes, DefaultMaxRowBytes)
		trajs, err := openTrajectories(dir, over)
		if err != nil {
			return err
		}
		tasks, err := openTasks(dir, e.opt.Input, e.need[d])
		if err != nil {
			trajs.Close()
			return err
		}
		var answers *rundir.SideLines[json.RawMessage]
		if e.opt.Format == FormatNemoGym {
			if answers, err = openVerifyAnswers(dir, over); err != nil {
				trajs.Close()
				tasks.close()
				return err
			}
		}
		err = rundir.ReadJournal(dir, func(r *record.Record) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if why := e.eligible(r); why != "" {
				e.rep.Dropped[why]++
				trajs.Skip(r.Key())
				answers.Skip(r.Key())
				return nil
			}
			g := e.groups[e.groupOf(r)]
			task, err := tasks.get(r.TaskIndex)
			if err != nil {
				return err
			}
			if filter != nil {
				if why := filter(r, g); why != "" {
					e.rep.Dropped[why]++
					trajs.Skip(r.Key())
					return nil
				}
			}
			// A line longer than the bound leaves its rollout out, named.
			var large *rundir.LineOverError
			leftOut := func() error {
				e.rep.Dropped[DropTooLarge]++
				if e.opt.Warnings != nil {
					fmt.Fprintf(e.opt.Warnings, "rollout: warning: export: %v: task %d repeat %d arm %q left out\n", large, r.TaskIndex, r.RolloutIndex, r.Arm)
				}
				return nil
			}
			tr, ok, err := trajs.Get(r.Key())
			if errors.As(err, &large) {
				answers.Skip(r.Key())
				return leftOut()
			}
			if err != nil {
				return err
			}
			var verify json.RawMessage
			if answers != nil {
				verify, _, err = answers.Get(r.Key())
				if errors.As(err, &large) {
					return leftOut()
				}
				if err != nil {
					return err
				}
			}
			if !ok || tr == nil {
				e.rep.Dropped[DropNoTrajectory]++
				return nil
			}
			if task == nil {
				e.rep.Dropped[DropNoTask]++
				return nil
			}
			if task.Err != nil {
				// The record ran this row (a bad row's record is bad_task, never exported):
				// the task file is not the run's.
				return &InputError{fmt.Errorf("%v: the row of task %d, which %s ran: not the run's task file", task.Err, r.TaskIndex, dir)}
			}
			for i := range tr.Rounds {
				if tr.Rounds[i].GenerationTokenIDs != nil && tr.Rounds[i].PromptTokenIDs == nil {
					e.rep.MissingPromptIDs++
				}
			}
			isContiguous := contiguous(tr.Rounds)
			why, err := fn(&rollout{dir: d, rec: r, traj: tr, task: task, g: g, verify: verify})
			if err != nil {
				return err
			}
			if why != "" {
				e.rep.Dropped[why]++
			} else {
				e.rep.Kept++
				if !isContiguous {
					e.rep.NonContiguous++
				}
			}
			return nil
		})
		cerr := errors.Join(trajs.Close(), tasks.close(), answers.Close())
		if err != nil {
			return err
		}
		if cerr != nil {
			return cerr
		}
	}
	return nil
}

// runRows writes one row per kept rollout: row makes it (nil: left out, with the reason).
func runRows[T any](ctx context.Context, e *exporter, row func(*rollout) (*T, string, error)) error {
	out, err := newSink[T](e.opt.Output)
	if err != nil {
		return err
	}
	var filter func(*record.Record, *group) string
	switch e.opt.Format {
	case FormatRL:
		filter = e.rlFilter
	case FormatSFT:
		filter = e.sftFilter
	}
	err = e.each(ctx, filter, func(ro *rollout) (string, error) {
		r, why, err := row(ro)
		if err != nil || r == nil {
			return why, err
		}
		e.rep.Rows++
		return "", out.write(r)
	})
	if err != nil {
		out.abort()
		return err
	}
	return out.commit()
}

// groupKey is a group: a task's rollouts under one arm ("" when arms are pooled).
type groupKey struct {
	task int64
	arm  string
}

func (e *exporter) groupOf(r *record.Record) groupKey {
	if e.opt.PoolArms {
		return groupKey{task: r.TaskIndex}
	}
	return groupKey{r.TaskIndex, r.Arm}
}

// keyHash is a 64-bit hash of a rollout key (FNV-1a): the duplicate check keeps 8 bytes a
// rollout, not the key.
func keyHash(k record.Key) uint64 {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(k.Task))
	binary.LittleEndian.PutUint64(b[8:], uint64(k.Rollout))
	h.Write(b[:])
	h.Write([]byte(k.Arm))
	return h.Sum64()
}

// taskName names a task: its id, else its index.
func taskName(r *record.Record) string {
	if r.TaskID != "" {
		return r.TaskID
	}
	return "task-" + strconv.FormatInt(r.TaskIndex, 10)
}

// groupID names a rollout's group: its task, and its arm unless arms are pooled.
func (e *exporter) groupID(r *record.Record) string {
	if e.opt.PoolArms {
		return taskName(r)
	}
	return taskName(r) + "/" + r.Arm
}

// Print writes the report: what was written, kept and dropped, and why.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "rollout export: %s: %d rows (%s) from %d records in %d groups\n", r.Output, r.Rows, r.Format, r.Read, r.Groups)
	fmt.Fprintf(w, "  kept %d rollouts\n", r.Kept)
	for _, k := range sortedKeys(r.Dropped) {
		fmt.Fprintf(w, "  dropped %d: %s\n", r.Dropped[k], k)
	}
	for _, k := range sortedKeys(r.GroupsDropped) {
		fmt.Fprintf(w, "  dropped %d groups: %s\n", r.GroupsDropped[k], k)
	}
	if r.UniformGroups > 0 && r.Format == FormatRL && r.GroupsDropped[DropUniform] == 0 {
		fmt.Fprintf(w, "  note: %d of %d groups have all rewards equal (advantage 0; --drop-uniform-groups leaves them out)\n", r.UniformGroups, r.Groups)
	}
	if r.NonContiguous > 0 {
		fmt.Fprintf(w, "  warning: %d rollouts have a model call whose prompt_token_ids do not begin with the previous call's prompt and generated ids (NeMo RL refuses them: \"Non-contiguous messages found\"); the endpoint re-tokenized the history instead of taking back the generated ids\n", r.NonContiguous)
	}
	if r.DuplicateKeys > 0 {
		fmt.Fprintf(w, "  warning: %d rollouts have the key (task, repeat, arm) of a rollout of an earlier directory: the directories are runs of the same tasks (not shards of one run), and each group holds the rollouts of all of them\n", r.DuplicateKeys)
	}
	if r.MissingPromptIDs > 0 {
		fmt.Fprintf(w, "  note: %d model calls have no prompt_token_ids (the endpoint did not return them)\n", r.MissingPromptIDs)
	}
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
