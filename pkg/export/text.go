package export

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// LayoutText is the sft layout of rendered conversations (--layout text).
const LayoutText = "text"

// TextRow is a conversation as the model's chat template renders it (--format sft --layout
// text): the text, the spans of the model's answers in it (what training counts; the system,
// user and tool messages and the template's own text around the answers are masked), and,
// when the run captured them, the token ids the model saw and wrote with a mask that is 1
// exactly on the generated ids (TRL's SFTTrainer builds its labels from assistant_masks).
type TextRow struct {
	Text string `parquet:"text" json:"text"`
	// AssistantSpans are [start, end) in code points: for each answer, from the end of the
	// generation prompt that preceded it to the end of its rendering (its end-of-turn text
	// included).
	AssistantSpans []Span `parquet:"assistant_spans,list" json:"assistant_spans"`
	// InputIDs and AssistantMasks are the rl format's input_ids and loss_mask: empty unless
	// every model call has its ids and each call's prompt ids begin with the previous call's
	// prompt and generated ids.
	InputIDs       []int32 `parquet:"input_ids,list" json:"input_ids"`
	AssistantMasks []int32 `parquet:"assistant_masks,list" json:"assistant_masks"`
}

func (e *exporter) textRow(ro *rollout) (*TextRow, string, error) {
	msgs, prompt, tools, why, err := e.sftMessages(ro)
	if why != "" || err != nil {
		return nil, why, err
	}
	raw := make([]json.RawMessage, len(msgs))
	roles := make([]string, len(msgs))
	for i := range msgs {
		if raw[i], err = jsonfast.Marshal(&msgs[i]); err != nil {
			return nil, "", err
		}
		roles[i] = msgs[i].Role
	}
	text, spans, err := e.template.renderSpans(raw, roles, tools, prompt)
	switch {
	case errors.Is(err, errNotPrefix):
		return nil, DropNotPrefix, nil
	case errors.Is(err, errFloat):
		return nil, DropFloat, nil
	case err != nil:
		return nil, "", &InputError{fmt.Errorf("--chat-template %s: task %s repeat %d: %w", e.template.Path, taskName(ro.rec), ro.rec.RolloutIndex, err)}
	}
	ids, mask := sequence(ro.traj.Rounds)
	if len(ids) > 0 {
		e.rep.TokenRows++
	}
	return &TextRow{Text: text, AssistantSpans: spans, InputIDs: ids, AssistantMasks: mask}, "", nil
}
