package recordtest

import (
	"encoding/json"
	"fmt"
	"slices"
)

// NemoRLPostprocess is NeMo RL's nemo_gym postprocessing of one rollout line (nemo_rl/
// environments/nemo_gym.py): the output items with generation_token_ids, in order, each
// asserted to have prompt ids that begin with the ids seen so far ("Non-contiguous messages
// found!"), which then become its prompt and generated ids. It returns the trainable items.
func NemoRLPostprocess(line []byte) (int, error) {
	var row struct {
		Response struct {
			Output []map[string]json.RawMessage `json:"output"`
		} `json:"response"`
	}
	if err := json.Unmarshal(line, &row); err != nil {
		return 0, err
	}
	var seen []int32
	n := 0
	for _, item := range row.Response.Output {
		var gen, prompt []int32
		if raw, ok := item["generation_token_ids"]; ok {
			if err := json.Unmarshal(raw, &gen); err != nil {
				return n, err
			}
		}
		if len(gen) == 0 {
			continue // _is_trainable_output_item
		}
		var lp []float64
		if err := json.Unmarshal(item["prompt_token_ids"], &prompt); err != nil {
			return n, fmt.Errorf("prompt_token_ids: %v", err)
		}
		if err := json.Unmarshal(item["generation_log_probs"], &lp); err != nil || len(lp) != len(gen) {
			return n, fmt.Errorf("generation_log_probs: %d for %d ids (%v)", len(lp), len(gen), err)
		}
		if len(prompt) < len(seen) || !slices.Equal(prompt[:len(seen)], seen) {
			return n, fmt.Errorf("Non-contiguous messages found! (trainable item %d)", n)
		}
		seen = append(slices.Clone(prompt), gen...)
		n++
	}
	return n, nil
}
