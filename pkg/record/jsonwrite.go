package record

// Writing the journal's and the trajectories file's lines without encoding/json's reflection:
// the same bytes as a json.Encoder with SetEscapeHTML(false) writes (a test checks), at a
// fraction of the cost and without allocations. Values encoding/json refuses (a NaN reward, a
// time out of its years) are left to encoding/json, for its error.

import (
	"strconv"

	"github.com/rollout-dev/rollout/internal/jsonw"
)

// AppendJSON appends r as one JSON line (with its newline), the bytes json.Encoder
// (HTML escaping off) writes for it; ok is false, and dst unchanged, for a record it
// cannot write (a NaN or infinite number, a time outside the years 0 to 9999): encoding/json
// then gives its error.
func AppendJSON(dst []byte, r *Record, keys []string) (out []byte, _ []string, ok bool) {
	n := len(dst)
	dst = append(dst, `{"task_index":`...)
	dst = strconv.AppendInt(dst, r.TaskIndex, 10)
	dst = append(dst, `,"rollout_index":`...)
	dst = strconv.AppendInt(dst, r.RolloutIndex, 10)
	dst = append(dst, `,"task_id":`...)
	dst = jsonw.AppendString(dst, r.TaskID)
	if r.TaskHash != "" {
		dst = append(dst, `,"task_hash":`...)
		dst = jsonw.AppendString(dst, r.TaskHash)
	}
	dst = append(dst, `,"arm":`...)
	dst = jsonw.AppendString(dst, r.Arm)
	dst = append(dst, `,"agent":`...)
	dst = jsonw.AppendString(dst, r.Agent)
	dst = append(dst, `,"model":`...)
	dst = jsonw.AppendString(dst, r.Model)
	dst = append(dst, `,"reward":`...)
	if dst, ok = jsonw.AppendFloat(dst, r.Reward); !ok {
		return dst[:n], keys, false
	}
	dst = append(dst, `,"has_reward":`...)
	dst = strconv.AppendBool(dst, r.HasReward)
	if len(r.RewardComponents) > 0 {
		dst = append(dst, `,"reward_components":{`...)
		keys = keys[:0]
		for k := range r.RewardComponents {
			keys = append(keys, k)
		}
		sortKeys(keys)
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsonw.AppendString(dst, k)
			dst = append(dst, ':')
			if dst, ok = jsonw.AppendFloat(dst, r.RewardComponents[k]); !ok {
				return dst[:n], keys, false
			}
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `,"rounds":`...)
	dst = strconv.AppendInt(dst, int64(r.Rounds), 10)
	dst = append(dst, `,"tool_calls":`...)
	dst = strconv.AppendInt(dst, int64(r.ToolCalls), 10)
	dst = append(dst, `,"tool_names":`...)
	if r.ToolNames == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i, name := range r.ToolNames {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsonw.AppendString(dst, name)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"tool_errors":`...)
	dst = strconv.AppendInt(dst, int64(r.ToolErrors), 10)
	dst = append(dst, `,"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, r.PromptTokens, 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, r.CompletionTokens, 10)
	dst = append(dst, `,"latency_ms":`...)
	if dst, ok = jsonw.AppendFloat(dst, r.LatencyMs); !ok {
		return dst[:n], keys, false
	}
	dst = append(dst, `,"termination":`...)
	dst = jsonw.AppendString(dst, r.Termination)
	dst = append(dst, `,"failure_class":`...)
	dst = jsonw.AppendString(dst, string(r.FailureClass))
	dst = append(dst, `,"error":`...)
	dst = jsonw.AppendString(dst, r.Error)
	dst = append(dst, `,"attempts":`...)
	dst = strconv.AppendInt(dst, int64(r.Attempts), 10)
	dst = append(dst, `,"started_at":"`...)
	t, err := r.StartedAt.AppendText(dst)
	if err != nil {
		return dst[:n], keys, false
	}
	dst = t
	dst = append(dst, `","seed":`...)
	dst = strconv.AppendInt(dst, r.Seed, 10)
	dst = append(dst, `,"source_file":`...)
	dst = jsonw.AppendString(dst, r.SourceFile)
	dst = append(dst, `,"source_line":`...)
	dst = strconv.AppendInt(dst, r.SourceLine, 10)
	if len(r.TaskFields) > 0 {
		dst = append(dst, `,"task_fields":{`...)
		keys = keys[:0]
		for k := range r.TaskFields {
			keys = append(keys, k)
		}
		sortKeys(keys)
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsonw.AppendString(dst, k)
			dst = append(dst, ':')
			dst = jsonw.AppendString(dst, r.TaskFields[k])
		}
		dst = append(dst, '}')
	}
	clear(keys)
	return append(dst, '}', '\n'), keys[:0], true
}

// sortKeys sorts the keys of a map, which has a few: an insertion sort.
func sortKeys(ks []string) {
	for i := 1; i < len(ks); i++ {
		for j := i; j > 0 && ks[j] < ks[j-1]; j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
}
