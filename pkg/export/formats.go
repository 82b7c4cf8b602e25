package export

import (
	"context"
	"path/filepath"
	"sort"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/record"
)

// RLRow is one rollout for RL training (--format rl).
type RLRow struct {
	Run              string      `parquet:"run" json:"run"`
	TaskIndex        int64       `parquet:"task_index" json:"task_index"`
	TaskID           string      `parquet:"task_id" json:"task_id"`
	GroupID          string      `parquet:"group_id" json:"group_id"`
	Repeat           int64       `parquet:"repeat" json:"repeat"`
	Arm              string      `parquet:"arm" json:"arm"`
	Reward           float64     `parquet:"reward" json:"reward"`
	RewardComponents []Component `parquet:"reward_components,list" json:"reward_components"`
	// Advantage is (reward − group mean) / (group std + Epsilon), the std the sample one.
	Advantage float64 `parquet:"advantage" json:"advantage"`
	// RewardMinusMean is reward − group mean (Dr. GRPO's advantage, without the std).
	RewardMinusMean float64         `parquet:"reward_minus_mean" json:"reward_minus_mean"`
	GroupSize       int64           `parquet:"group_size" json:"group_size"`
	GroupMean       float64         `parquet:"group_mean" json:"group_mean"`
	GroupStd        float64         `parquet:"group_std" json:"group_std"`
	Termination     string          `parquet:"termination" json:"termination"`
	FailureClass    string          `parquet:"failure_class" json:"failure_class"`
	Messages        []OpenAIMessage `parquet:"messages,list" json:"messages"`
	// Tools is the row's tools as JSON text ("[]" for none), in Parquet and JSONL alike.
	Tools string `parquet:"tools" json:"tools"`
	// Calls is each model call's tokens, in order; empty when the run did not capture them.
	Calls []Call `parquet:"calls,list" json:"calls"`
	// InputIDs is the whole rollout as the model saw and wrote it, token by token: the last
	// call's prompt ids and generated ids; LossMask is 1 on the ids a call generated, 0 on
	// the rest (the chat template's tokens, the prompt, tool outputs). Both are empty unless
	// every call has prompt and generated ids and each call's prompt begins with the previous
	// call's prompt and generated ids (then the last call's sequence holds every call's).
	InputIDs []int32 `parquet:"input_ids,list" json:"input_ids"`
	LossMask []int32 `parquet:"loss_mask,list" json:"loss_mask"`
}

// sequence is the rollout's token sequence and loss mask (see RLRow.InputIDs), or two empty
// lists.
func sequence(rounds []storedRound) (ids, mask []int32) {
	if len(rounds) == 0 || !contiguous(rounds) {
		return []int32{}, []int32{}
	}
	for i := range rounds {
		if rounds[i].PromptTokenIDs == nil || len(rounds[i].GenerationTokenIDs) == 0 {
			return []int32{}, []int32{}
		}
	}
	last := &rounds[len(rounds)-1]
	ids = append(append(make([]int32, 0, len(last.PromptTokenIDs)+len(last.GenerationTokenIDs)), last.PromptTokenIDs...), last.GenerationTokenIDs...)
	mask = make([]int32, len(ids))
	for i := range rounds {
		start := len(rounds[i].PromptTokenIDs)
		for j := range rounds[i].GenerationTokenIDs {
			mask[start+j] = 1
		}
	}
	return ids, mask
}

func (e *exporter) rlFilter(r *record.Record, g *group) string {
	if e.opt.DropUniformGroups && g.uniform() {
		return DropUniform
	}
	return ""
}

func (e *exporter) rlRow(ro *rollout) (*RLRow, string, error) {
	r, g := ro.rec, ro.g
	tools, err := toolsJSON(ro.task)
	if err != nil {
		return nil, "", err
	}
	std := g.std()
	ids, mask := sequence(ro.traj.Rounds)
	return &RLRow{
		Run: filepath.Base(e.opt.Dirs[ro.dir]), TaskIndex: r.TaskIndex, TaskID: r.TaskID, GroupID: e.groupID(r),
		Repeat: r.RolloutIndex, Arm: r.Arm, Reward: r.Reward, RewardComponents: components(r.RewardComponents),
		Advantage: (r.Reward - g.mean) / (std + Epsilon), RewardMinusMean: r.Reward - g.mean,
		GroupSize: int64(g.n), GroupMean: g.mean, GroupStd: std,
		Termination: r.Termination, FailureClass: string(r.FailureClass),
		Messages: openaiMessages(ro.traj.Messages, false, promptLen(ro.traj.Messages), reasonings(ro.traj.Rounds)), Tools: tools, Calls: nonNilCalls(calls(ro.traj.Rounds)),
		InputIDs: ids, LossMask: mask,
	}, "", nil
}

// Component is one reward component: a list of them rather than a Parquet MAP, which HF
// datasets has no feature type for.
type Component struct {
	Name  string  `parquet:"name" json:"name"`
	Value float64 `parquet:"value" json:"value"`
}

// components is m as a list sorted by name ([] for none).
func components(m map[string]float64) []Component {
	out := make([]Component, 0, len(m))
	for k, v := range m {
		out = append(out, Component{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func nonNilCalls(c []Call) []Call {
	if c == nil {
		return []Call{}
	}
	return c
}

// SFTRow is one chat fine-tuning example (--format sft), as HF chat templates render it (TRL's
// SFTTrainer, NeMo RL's OpenAIFormatDataset, verl, OpenRLHF): the messages up to and with the
// model's last answer, tool-call arguments as objects (in JSONL; JSON text in Parquet), each
// answer's reasoning as reasoning_content, and the tools as JSON text.
type SFTRow struct {
	Messages []ChatMessage `parquet:"messages,list" json:"messages"`
	Tools    string        `parquet:"tools" json:"tools"`
}

func (e *exporter) sftFilter(r *record.Record, g *group) string {
	if e.opt.MinReward != nil && r.Reward < *e.opt.MinReward {
		return DropMinReward
	}
	if e.opt.BestOfGroup && r.Key() != g.best {
		return DropNotBest
	}
	return ""
}

// chatAnswers is a rollout's messages in the chat-template shape, up to and with its last
// assistant message (NeMo RL's OpenAI-format dataset requires the last message to be the
// assistant's); why says why it has none to train on: no answer, an answer cut off by the
// token limit, or tool-call arguments that are not a JSON object.
func chatAnswers(tr *storedTrajectory) (msgs []ChatMessage, prompt int, why string) {
	prompt = promptLen(tr.Messages)
	if prompt == len(tr.Messages) {
		return nil, prompt, DropNoAnswer
	}
	for i := range tr.Rounds {
		if tr.Rounds[i].FinishReason == "length" {
			return nil, prompt, DropTruncated
		}
	}
	msgs, ok := messages(tr.Messages, true, argsObject, prompt, reasonings(tr.Rounds))
	if !ok {
		return nil, prompt, DropMalformed
	}
	last := len(msgs) - 1
	for msgs[last].Role != openai.ChatMessageRoleAssistant {
		last--
	}
	return msgs[:last+1], prompt, ""
}

func (e *exporter) sftRow(ro *rollout) (*SFTRow, string, error) {
	msgs, _, tools, why, err := e.sftMessages(ro)
	if why != "" || err != nil {
		return nil, why, err
	}
	return &SFTRow{Messages: msgs, Tools: tools}, "", nil
}

// sftMessages is what an sft row holds of a rollout: its messages through its last answer, the
// number of them before its first answer, and its tools as JSON text; why says why it has no
// row (not the best of its group, no answer to train on).
func (e *exporter) sftMessages(ro *rollout) (msgs []ChatMessage, prompt int, tools, why string, err error) {
	if e.opt.BestOfGroup && ro.dir != ro.g.bestDir {
		return nil, 0, "", DropNotBest, nil
	}
	if msgs, prompt, why = chatAnswers(ro.traj); why != "" {
		return nil, 0, "", why, nil
	}
	tools, err = toolsJSON(ro.task)
	return msgs, prompt, tools, "", err
}

// PreferenceRow is a chosen/rejected pair of one group (--format preference), as TRL's DPO
// trainer reads a conversational dataset: the context both rollouts share (the task's prompt
// and every turn they took alike), and each rollout's assistant messages from the first one in
// which they differ up to the next tool or user message, so that the loss counts the policy's
// tokens only (TRL's DPO takes every token of chosen and rejected as the policy's: a tool's
// output in them would be trained on as if the model had written it).
type PreferenceRow struct {
	Prompt   []ChatMessage `parquet:"prompt,list" json:"prompt"`
	Chosen   []ChatMessage `parquet:"chosen,list" json:"chosen"`
	Rejected []ChatMessage `parquet:"rejected,list" json:"rejected"`
	PreferenceMeta
}

// PreferenceMeta is what a pair says of its rollouts, in every layout.
type PreferenceMeta struct {
	Tools          string  `parquet:"tools" json:"tools"`
	TaskIndex      int64   `parquet:"task_index" json:"task_index"`
	TaskID         string  `parquet:"task_id" json:"task_id"`
	ChosenReward   float64 `parquet:"chosen_reward" json:"chosen_reward"`
	RejectedReward float64 `parquet:"rejected_reward" json:"rejected_reward"`
	ChosenRepeat   int64   `parquet:"chosen_repeat" json:"chosen_repeat"`
	RejectedRepeat int64   `parquet:"rejected_repeat" json:"rejected_repeat"`
	ChosenArm      string  `parquet:"chosen_arm" json:"chosen_arm"`
	RejectedArm    string  `parquet:"rejected_arm" json:"rejected_arm"`
}

// NemoRLPreferenceRow is a pair as NeMo RL's PreferenceDataset reads it (--layout nemo-rl):
// the shared context and two ranked completions (rank 0 preferred), message lists each.
type NemoRLPreferenceRow struct {
	Context     []ChatMessage      `parquet:"context,list" json:"context"`
	Completions []RankedCompletion `parquet:"completions,list" json:"completions"`
	PreferenceMeta
}

// RankedCompletion is one of NeMo RL's completions.
type RankedCompletion struct {
	Rank       int64         `parquet:"rank" json:"rank"`
	Completion []ChatMessage `parquet:"completion,list" json:"completion"`
}

// Preference layouts (--layout).
const (
	LayoutTRL    = "trl"
	LayoutNemoRL = "nemo-rl"
)

// sameTurn says whether two messages of two rollouts say the same (tool call ids aside: each
// rollout has its own).
func sameTurn(a, b *ChatMessage) bool {
	if a.Role != b.Role || a.Content != b.Content || len(a.ToolCalls) != len(b.ToolCalls) {
		return false
	}
	for i := range a.ToolCalls {
		if a.ToolCalls[i].Function.Name != b.ToolCalls[i].Function.Name || a.ToolCalls[i].Function.Arguments != b.ToolCalls[i].Function.Arguments {
			return false
		}
	}
	return true
}

// split cuts two rollouts' messages where they first differ: the shared context (chosen's
// messages), and each side's assistant messages from there to the next tool or user message.
// why says why there is no pair: they do not differ, or differ first in what the environment
// said rather than in what the model did.
func split(chosen, rejected []ChatMessage) (context, c, r []ChatMessage, why string) {
	k := 0
	for k < len(chosen) && k < len(rejected) && sameTurn(&chosen[k], &rejected[k]) {
		k++
	}
	if k == len(chosen) || k == len(rejected) {
		return nil, nil, nil, DropSameAnswers
	}
	if chosen[k].Role != openai.ChatMessageRoleAssistant || rejected[k].Role != openai.ChatMessageRoleAssistant {
		return nil, nil, nil, DropEnvironment
	}
	turn := func(m []ChatMessage) []ChatMessage {
		end := k
		for end < len(m) && m[end].Role == openai.ChatMessageRoleAssistant {
			end++
		}
		return m[k:end]
	}
	return chosen[:k], turn(chosen), turn(rejected), ""
}

// pairable says why a group makes no pair ("" when it does).
func (e *exporter) pairable(g *group) string {
	switch {
	case g.n < 2:
		return DropNoPair
	case g.uniform():
		return DropEqual
	case g.max-g.min < e.opt.MinMargin:
		return DropMargin
	}
	return ""
}

// halfPair is a group's pair while one of its rollouts is still to be read.
type halfPair struct {
	meta              PreferenceMeta
	chosen, rejected  []ChatMessage
	hasChosen, hasRej bool
}

// preference writes a pair per group as soon as both of its rollouts have been read: a
// half-made pair waits in memory, one per group at most.
func (e *exporter) preference(ctx context.Context) error {
	for _, g := range e.groups {
		if why := e.pairable(g); why != "" {
			e.rep.GroupsDropped[why]++
		}
	}
	var write func(h *halfPair, context, c, r []ChatMessage) error
	var commit func() error
	var abort func()
	if e.opt.Layout == LayoutNemoRL {
		out, err := newSink[NemoRLPreferenceRow](e.opt.Output)
		if err != nil {
			return err
		}
		write = func(h *halfPair, context, c, r []ChatMessage) error {
			return out.write(&NemoRLPreferenceRow{Context: context, PreferenceMeta: h.meta,
				Completions: []RankedCompletion{{Rank: 0, Completion: c}, {Rank: 1, Completion: r}}})
		}
		commit, abort = out.commit, out.abort
	} else if e.opt.Layout == LayoutOpenAI {
		out, err := newSink[OpenAIDPORow](e.opt.Output)
		if err != nil {
			return err
		}
		write = func(h *halfPair, context, c, r []ChatMessage) error {
			row := &OpenAIDPORow{PreferredOutput: openaiFT(c), NonPreferredOutput: openaiFT(r)}
			row.Input.Messages = openaiFT(context)
			if h.meta.Tools != "[]" {
				row.Input.Tools = JSONText(h.meta.Tools)
			}
			return out.write(row)
		}
		commit, abort = out.commit, out.abort
	} else {
		out, err := newSink[PreferenceRow](e.opt.Output)
		if err != nil {
			return err
		}
		write = func(h *halfPair, context, c, r []ChatMessage) error {
			return out.write(&PreferenceRow{Prompt: context, Chosen: c, Rejected: r, PreferenceMeta: h.meta})
		}
		commit, abort = out.commit, out.abort
	}
	half := map[groupKey]*halfPair{}
	filter := func(r *record.Record, g *group) string {
		if why := e.pairable(g); why != "" {
			return why
		}
		if k := r.Key(); k != g.best && k != g.worst {
			return DropPaired
		}
		return ""
	}
	err := e.each(ctx, filter, func(ro *rollout) (string, error) {
		r, g := ro.rec, ro.g
		k := r.Key()
		isBest := k == g.best && ro.dir == g.bestDir
		isWorst := k == g.worst && ro.dir == g.worstDr
		if !isBest && !isWorst {
			return DropPaired, nil // the same key in another directory
		}
		msgs, _, why := chatAnswers(ro.traj)
		if why != "" {
			delete(half, e.groupOf(r))
			return why, nil // no pair for this group
		}
		h := half[e.groupOf(r)]
		if h == nil {
			tools, err := toolsJSON(ro.task)
			if err != nil {
				return "", err
			}
			h = &halfPair{meta: PreferenceMeta{Tools: tools, TaskIndex: r.TaskIndex, TaskID: r.TaskID}}
			half[e.groupOf(r)] = h
		}
		if isBest {
			h.chosen, h.hasChosen = msgs, true
			h.meta.ChosenReward, h.meta.ChosenRepeat, h.meta.ChosenArm = r.Reward, r.RolloutIndex, r.Arm
		} else {
			h.rejected, h.hasRej = msgs, true
			h.meta.RejectedReward, h.meta.RejectedRepeat, h.meta.RejectedArm = r.Reward, r.RolloutIndex, r.Arm
		}
		if !h.hasChosen || !h.hasRej {
			return "", nil
		}
		delete(half, e.groupOf(r))
		context, c, rj, why := split(h.chosen, h.rejected)
		if why != "" {
			e.rep.GroupsDropped[why]++
			return "", nil
		}
		e.rep.Rows++
		return "", write(h, context, c, rj)
	})
	if err != nil {
		abort()
		return err
	}
	return commit()
}

// VerlRow is one task as verl's RLHFDataset reads its train files (--format verl, Parquet):
// the prompt (chat messages, rendered by verl with the tokenizer's template), data_source (the
// environment: the row's agent_ref.name, else "rollout"), ability, reward_model (style and
// ground_truth: the task row as JSON text, for a reward function that calls the resource
// server) and extra_info (index, the task id and the tools as JSON text). One row per task
// of the exported rollouts.
type VerlRow struct {
	DataSource  string          `parquet:"data_source" json:"data_source"`
	Prompt      []PromptMessage `parquet:"prompt,list" json:"prompt"`
	Ability     string          `parquet:"ability" json:"ability"`
	RewardModel VerlRewardModel `parquet:"reward_model" json:"reward_model"`
	ExtraInfo   VerlExtraInfo   `parquet:"extra_info" json:"extra_info"`
}

// PromptMessage is a prompt message: role and text.
type PromptMessage struct {
	Role    string `parquet:"role" json:"role"`
	Content string `parquet:"content" json:"content"`
}

// VerlRewardModel is verl's reward_model member.
type VerlRewardModel struct {
	Style       string `parquet:"style" json:"style"`
	GroundTruth string `parquet:"ground_truth" json:"ground_truth"`
}

// VerlExtraInfo is verl's extra_info member.
type VerlExtraInfo struct {
	Index  int64  `parquet:"index" json:"index"`
	TaskID string `parquet:"task_id" json:"task_id"`
	Tools  string `parquet:"tools" json:"tools"`
}

// verlRows writes a row per task, the first time one of its rollouts is read (a set of task
// indexes is all it keeps).
func (e *exporter) verlRows(ctx context.Context) error {
	out, err := newSink[VerlRow](e.opt.Output)
	if err != nil {
		return err
	}
	written := map[int64]bool{}
	filter := func(r *record.Record, _ *group) string {
		if written[r.TaskIndex] {
			return DropTaskWritten
		}
		return ""
	}
	err = e.each(ctx, filter, func(ro *rollout) (string, error) {
		r, task := ro.rec, ro.task
		if written[r.TaskIndex] {
			return DropTaskWritten, nil
		}
		written[r.TaskIndex] = true
		tools, err := toolsJSON(task)
		if err != nil {
			return "", err
		}
		source := "rollout"
		if task.AgentRef != nil && task.AgentRef.Name != "" {
			source = task.AgentRef.Name
		}
		var prompt []PromptMessage
		for _, m := range agent.ChatMessages(task.Params) {
			role := m.Role
			if role == openai.ChatMessageRoleDeveloper {
				role = openai.ChatMessageRoleSystem
			}
			text := m.Content
			for _, p := range m.MultiContent {
				text += p.Text
			}
			prompt = append(prompt, PromptMessage{Role: role, Content: text})
		}
		e.rep.Rows++
		return "", out.write(&VerlRow{DataSource: source, Prompt: prompt, Ability: "agent",
			RewardModel: VerlRewardModel{Style: "rule", GroundTruth: string(task.Raw)},
			ExtraInfo:   VerlExtraInfo{Index: r.TaskIndex, TaskID: r.TaskID, Tools: tools}})
	})
	if err != nil {
		out.abort()
		return err
	}
	return out.commit()
}
