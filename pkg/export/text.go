package export

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rollout-dev/rollout/internal/jsonfast"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// LayoutText is the sft layout of rendered conversations (--layout text).
const LayoutText = "text"

// TextRow is a conversation as the model's chat template renders it (--format sft --layout
// text): the text and the spans of the model's answers in it (what training counts; the
// system, user and tool messages and the template's own text around the answers are masked).
type TextRow struct {
	Text string `parquet:"text" json:"text"`
	// AssistantSpans are [start, end) in code points: for each answer, from the end of the
	// generation prompt that preceded it to the end of its rendering (its end-of-turn text
	// included).
	AssistantSpans []Span `parquet:"assistant_spans,list" json:"assistant_spans"`
}

// TokenTextRow is a TextRow of a run that captured token ids (--capture-tokens): with the
// token ids the model saw and wrote, and a mask that is 1 exactly on the generated ids (the rl
// format's input_ids and loss_mask, under the names TRL's SFTTrainer reads: a dataset with
// input_ids is taken as tokenized, and its labels are built from assistant_masks).
type TokenTextRow struct {
	TextRow
	InputIDs       []int32 `parquet:"input_ids,list" json:"input_ids"`
	AssistantMasks []int32 `parquet:"assistant_masks,list" json:"assistant_masks"`
}

// DropNoTokens: a rollout of a --capture-tokens run whose ids are not one sequence.
const DropNoTokens = "no token sequence (a model call without prompt or generated ids, or whose prompt ids do not begin with the previous call's prompt and generated ids)"

// tokenTextRow is textRow with the rollout's token sequence; a rollout without one is left
// out, so that every row has its ids.
func (e *exporter) tokenTextRow(ro *rollout) (*TokenTextRow, string, error) {
	row, why, err := e.textRow(ro)
	if row == nil || err != nil {
		return nil, why, err
	}
	ids, mask := sequence(ro.traj.Rounds)
	if len(ids) == 0 {
		return nil, DropNoTokens, nil
	}
	return &TokenTextRow{TextRow: *row, InputIDs: ids, AssistantMasks: mask}, "", nil
}

// capturedTokens says whether a run directory's manifest says it captured token ids.
func capturedTokens(dirs []string) bool {
	for _, dir := range dirs {
		m, err := rundir.ReadManifest(dir)
		if err != nil {
			continue
		}
		var cfg struct {
			CaptureTokens bool `json:"capture_tokens"`
		}
		if json.Unmarshal(m.Config, &cfg) == nil && cfg.CaptureTokens {
			return true
		}
	}
	return false
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
	return &TextRow{Text: text, AssistantSpans: spans}, "", nil
}
