package export

import (
	"context"
	"path/filepath"
	"sort"

	openai "github.com/sashabaranov/go-openai"

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
	return &RLRow{
		Run: filepath.Base(e.opt.Dirs[ro.dir]), TaskIndex: r.TaskIndex, TaskID: r.TaskID, GroupID: e.groupID(r),
		Repeat: r.RolloutIndex, Arm: r.Arm, Reward: r.Reward, RewardComponents: components(r.RewardComponents),
		Advantage: (r.Reward - g.mean) / (std + Epsilon), RewardMinusMean: r.Reward - g.mean,
		GroupSize: int64(g.n), GroupMean: g.mean, GroupStd: std,
		Termination: r.Termination, FailureClass: string(r.FailureClass),
		Messages: openaiMessages(ro.traj.Messages, false, promptLen(ro.traj.Messages), reasonings(ro.traj.Rounds)), Tools: tools, Calls: nonNilCalls(calls(ro.traj.Rounds)),
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
	if e.opt.BestOfGroup && keyOf(r) != g.best {
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
	if e.opt.BestOfGroup && ro.dir != ro.g.bestDir {
		return nil, DropNotBest, nil
	}
	msgs, _, why := chatAnswers(ro.traj)
	if why != "" {
		return nil, why, nil
	}
	tools, err := toolsJSON(ro.task)
	if err != nil {
		return nil, "", err
	}
	return &SFTRow{Messages: msgs, Tools: tools}, "", nil
}

// PreferenceRow is a chosen/rejected pair of one task (--format preference), as TRL's DPO
// trainer reads a conversational dataset: the shared prompt, and each rollout's messages after it.
type PreferenceRow struct {
	Prompt         []ChatMessage `parquet:"prompt,list" json:"prompt"`
	Chosen         []ChatMessage `parquet:"chosen,list" json:"chosen"`
	Rejected       []ChatMessage `parquet:"rejected,list" json:"rejected"`
	Tools          string        `parquet:"tools" json:"tools"`
	TaskIndex      int64         `parquet:"task_index" json:"task_index"`
	TaskID         string        `parquet:"task_id" json:"task_id"`
	ChosenReward   float64       `parquet:"chosen_reward" json:"chosen_reward"`
	RejectedReward float64       `parquet:"rejected_reward" json:"rejected_reward"`
	ChosenRepeat   int64         `parquet:"chosen_repeat" json:"chosen_repeat"`
	RejectedRepeat int64         `parquet:"rejected_repeat" json:"rejected_repeat"`
	ChosenArm      string        `parquet:"chosen_arm" json:"chosen_arm"`
	RejectedArm    string        `parquet:"rejected_arm" json:"rejected_arm"`
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

// preference writes a pair per group as soon as both of its rollouts have been read: a
// half-made pair waits in memory, one per group at most.
func (e *exporter) preference(ctx context.Context) error {
	for _, g := range e.groups {
		if why := e.pairable(g); why != "" {
			e.rep.GroupsDropped[why]++
		}
	}
	out, err := newSink[PreferenceRow](e.opt.Output)
	if err != nil {
		return err
	}
	half := map[groupKey]*PreferenceRow{}
	filter := func(r *record.Record, g *group) string {
		if why := e.pairable(g); why != "" {
			return why
		}
		if k := keyOf(r); k != g.best && k != g.worst {
			return DropPaired
		}
		return ""
	}
	err = e.each(ctx, filter, func(ro *rollout) (string, error) {
		r, g := ro.rec, ro.g
		k := keyOf(r)
		isBest := k == g.best && ro.dir == g.bestDir
		isWorst := k == g.worst && ro.dir == g.worstDr
		if !isBest && !isWorst {
			return DropPaired, nil // the same key in another directory
		}
		msgs, n, why := chatAnswers(ro.traj)
		if why != "" {
			return why, nil // no pair for this group
		}
		p := half[e.groupOf(r)]
		if p == nil {
			tools, err := toolsJSON(ro.task)
			if err != nil {
				return "", err
			}
			p = &PreferenceRow{Prompt: msgs[:n], Tools: tools, TaskIndex: r.TaskIndex, TaskID: r.TaskID}
			half[e.groupOf(r)] = p
		}
		if isBest {
			p.Chosen, p.ChosenReward, p.ChosenRepeat, p.ChosenArm = msgs[n:], r.Reward, r.RolloutIndex, r.Arm
		} else {
			p.Rejected, p.RejectedReward, p.RejectedRepeat, p.RejectedArm = msgs[n:], r.Reward, r.RolloutIndex, r.Arm
		}
		if p.Chosen != nil && p.Rejected != nil {
			delete(half, e.groupOf(r))
			e.rep.Rows++
			return "", out.write(p)
		}
		return "", nil
	})
	if err != nil {
		out.abort()
		return err
	}
	return out.commit()
}
