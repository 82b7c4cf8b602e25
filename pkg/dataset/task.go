// Package dataset reads tasks: NeMo Gym JSONL rows, streamed from a file, a
// gzip file or stdin, validated with FILE:LINE: FIELD: message errors.
package dataset

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// Task is one row of the input.
type Task struct {
	// Index is the 0-based position of the row among the non-blank lines of
	// the input.
	Index int
	// File and Line locate the row for error messages (Line is 1-based).
	File string
	Line int
	// Raw is the whole row exactly as read. It is what /seed_session gets.
	Raw []byte
	// Fields are the row's top-level members in input order, each value
	// byte-for-byte as read (a sub-slice of Raw, not a copy). /verify gets
	// these plus "response".
	Fields []Field
	// ID is the row's "id" field as text ("" when the row has none).
	ID string
	// AgentRef names the agent/server configuration that runs the row.
	AgentRef *AgentRef
	// Params is the parsed responses_create_params.
	Params *Params
	// Err is set when the row is malformed. Such a task is still handed
	// out so that it can end in a record with failure class bad_task.
	Err *RowError
}

// Field is one top-level member of a row.
type Field struct {
	Key   string
	Value json.RawMessage
}

// AgentRef is the optional agent_ref member of a row.
type AgentRef struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// Field returns the raw value of the top-level member key, or nil.
func (t *Task) Field(key string) json.RawMessage {
	for _, f := range t.Fields {
		if f.Key == key {
			return f.Value
		}
	}
	return nil
}

// AppendObject appends to dst the row as a JSON object with every
// top-level member except those named in skip, followed by the extra
// members, in order. Values are copied byte-for-byte.
func (t *Task) AppendObject(dst []byte, skip []string, extra ...Field) []byte {
	dst = append(dst, '{')
	n := 0
	write := func(f Field) {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = jsonfast.AppendString(dst, f.Key)
		dst = append(dst, ':')
		dst = append(dst, f.Value...)
	}
outer:
	for _, f := range t.Fields {
		for _, s := range skip {
			if f.Key == s {
				continue outer
			}
		}
		write(f)
	}
	for _, f := range extra {
		write(f)
	}
	return append(dst, '}')
}

// RowError is a validation error of one row: FILE:LINE: FIELD: message.
type RowError struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *RowError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Msg)
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}
