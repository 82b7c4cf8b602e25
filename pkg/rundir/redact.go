package rundir

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/rollout-dev/rollout/internal/jsonfast"
	"github.com/rollout-dev/rollout/internal/redact"
	"github.com/rollout-dev/rollout/pkg/record"
)

// redactor replaces secrets in what goes to disk: every string of a record, and the raw JSON
// of a trajectory and a verify answer (as written, and as JSON escapes them).
type redactor struct {
	text  *strings.Replacer
	raw   [][]byte // each secret, and its JSON-escaped form when that differs
	plain []byte
}

func newRedactor(secrets []string) *redactor {
	text := redact.Replacer(secrets)
	if text == nil {
		return nil
	}
	r := &redactor{text: text, plain: []byte(redact.Placeholder)}
	for _, s := range redact.Secrets(secrets) {
		r.raw = append(r.raw, []byte(s))
		if esc := jsonfast.AppendString(nil, s); string(esc[1:len(esc)-1]) != s {
			r.raw = append(r.raw, esc[1:len(esc)-1])
		}
	}
	return r
}

// result redacts the strings of r's record, its trajectory and its verify answer, in place.
func (r *redactor) result(res *record.Result) {
	rec := &res.Record
	for _, s := range []*string{&rec.TaskID, &rec.Arm, &rec.Agent, &rec.Model, &rec.Termination, &rec.Error, &rec.SourceFile} {
		*s = r.text.Replace(*s)
	}
	rec.FailureClass = record.FailureClass(r.text.Replace(string(rec.FailureClass)))
	for i := range rec.ToolNames {
		rec.ToolNames[i] = r.text.Replace(rec.ToolNames[i])
	}
	for k, v := range rec.TaskFields {
		if nv := r.text.Replace(v); nv != v {
			rec.TaskFields[k] = nv
		}
	}
	res.Trajectory = r.rawJSON(res.Trajectory)
	res.Verify = r.rawJSON(res.Verify)
}

// rawJSON replaces the secrets in a JSON value. A secret found outside a string (which would
// leave the value broken once replaced) makes the whole value a string saying so: nothing of
// it is worth a leak.
func (r *redactor) rawJSON(b json.RawMessage) json.RawMessage {
	found := false
	for _, s := range r.raw {
		if bytes.Contains(b, s) {
			found = true
			break
		}
	}
	if !found {
		return b
	}
	out := bytes.Clone(b)
	for _, s := range r.raw {
		out = bytes.ReplaceAll(out, s, r.plain)
	}
	if !json.Valid(out) {
		return json.RawMessage(`"` + redact.Placeholder + `: a secret was found in this value outside a string"`)
	}
	return out
}
