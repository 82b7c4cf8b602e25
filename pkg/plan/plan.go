// Package plan is the reference plan of a task: the tool calls that solve it, round by round,
// and the final answer built from their outputs. Task rows carry it in the field "reference_plan"
// (resource servers that do not know it ignore it). The simulator plays it (pkg/sim) and
// `rollout validate --oracle` proves with it that a task is solvable and that each required call
// is needed.
//
// A plan in a row:
//
//	"reference_plan": {
//	  "rounds": [
//	    [{"name": "find_ids", "arguments": {"category": "books"}}],
//	    [{"name": "fetch_record", "arguments": {"id": {"$ref": "0/ids/0"}}},
//	     {"name": "fetch_record", "arguments": {"id": {"$ref": "0/ids/1"}}}],
//	    [{"name": "submit_answer", "arguments": {"values": [{"$ref": "1/value"}, {"$ref": "2/value"}]}}]
//	  ],
//	  "final": "Submitted."
//	}
//
// Calls are numbered in plan order across rounds, from 0. Anywhere in a call's arguments or in
// "final", an object {"$ref": "N/POINTER"} stands for a value of call N's output (the tool's JSON
// answer): POINTER is a JSON Pointer (RFC 6901) into it, and "N" alone is the whole output. A
// reference may only name an earlier round's call, so the plan is playable round by round. The
// final answer is "final" with its references resolved: a string is the message text as is,
// any other value is written as compact JSON; no "final" means a short fixed text.
//
// A call marked "optional": true is not required: the oracle check does not expect the reward to
// drop without it.
package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// Field is the task row field that carries the plan.
const Field = "reference_plan"

// Plan is a task's reference plan.
type Plan struct {
	Rounds [][]Call        `json:"rounds"`
	Final  json.RawMessage `json:"final,omitempty"`
}

// Call is one planned tool call.
type Call struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Optional  bool            `json:"optional,omitempty"`
}

// Ref is a parsed reference: call Call's output, at Pointer.
type Ref struct {
	Call    int
	Pointer []string // unescaped reference tokens; empty for the whole output
}

func (r Ref) String() string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(r.Call))
	for _, t := range r.Pointer {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return b.String()
}

// ParseRef parses "N" or "N/POINTER".
func ParseRef(s string) (Ref, error) {
	head, rest, hasPtr := strings.Cut(s, "/")
	n, err := strconv.Atoi(head)
	if err != nil || n < 0 || head != strconv.Itoa(n) {
		return Ref{}, fmt.Errorf("reference %q: want CALL or CALL/POINTER, CALL a call's 0-based index in the plan", s)
	}
	r := Ref{Call: n}
	if hasPtr {
		for _, tok := range strings.Split(rest, "/") {
			if !validEscapes(tok) {
				return Ref{}, fmt.Errorf("reference %q: bad escape in %q (use ~0 for ~ and ~1 for /)", s, tok)
			}
			r.Pointer = append(r.Pointer, strings.NewReplacer("~1", "/", "~0", "~").Replace(tok))
		}
	}
	return r, nil
}

// validEscapes reports whether every "~" of a pointer token starts "~0" or "~1".
func validEscapes(tok string) bool {
	for i := 0; i < len(tok); i++ {
		if tok[i] == '~' && (i+1 == len(tok) || (tok[i+1] != '0' && tok[i+1] != '1')) {
			return false
		}
	}
	return true
}

// Parse decodes and checks a plan: at least one round, no empty round, every call named with an
// object of arguments, every reference well-formed and naming a call of an earlier round.
// Errors name the place, e.g. `rounds[1][0].arguments.id: reference "7/x": call 7 is not in an
// earlier round`.
func Parse(raw json.RawMessage) (*Plan, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var p Plan
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("not a plan: %v", err)
	}
	if !onlySpace(raw[dec.InputOffset():]) {
		return nil, fmt.Errorf("not a plan: trailing data after the JSON object")
	}
	if len(p.Rounds) == 0 {
		return nil, fmt.Errorf("rounds: empty; a plan needs at least one round of tool calls")
	}
	first := 0 // global index of the current round's first call
	for r, round := range p.Rounds {
		if len(round) == 0 {
			return nil, fmt.Errorf("rounds[%d]: empty round", r)
		}
		for i, c := range round {
			where := fmt.Sprintf("rounds[%d][%d]", r, i)
			if c.Name == "" {
				return nil, fmt.Errorf("%s.name: missing", where)
			}
			args := bytes.TrimSpace(c.Arguments)
			if len(args) == 0 || args[0] != '{' {
				return nil, fmt.Errorf("%s.arguments: want a JSON object", where)
			}
			if err := checkRefs(args, first, where+".arguments"); err != nil {
				return nil, err
			}
		}
		first += len(round)
	}
	if len(p.Final) > 0 {
		if err := checkRefs(p.Final, first, "final"); err != nil {
			return nil, err
		}
	}
	return &p, nil
}

func checkRefs(raw json.RawMessage, limit int, where string) error {
	v, err := decode(raw)
	if err != nil {
		return fmt.Errorf("%s: %v", where, err)
	}
	return walkRefs(v, where, func(ref string, at string) error {
		r, err := ParseRef(ref)
		if err != nil {
			return fmt.Errorf("%s: %v", at, err)
		}
		if r.Call >= limit {
			return fmt.Errorf("%s: reference %q: call %d is not in an earlier round", at, ref, r.Call)
		}
		return nil
	})
}

// walkRefs calls fn on every reference in v.
func walkRefs(v any, where string, fn func(ref, at string) error) error {
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := refOf(x); ok {
			return fn(ref, where)
		}
		for _, k := range sortedKeys(x) {
			if err := walkRefs(x[k], where+"."+k, fn); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := walkRefs(e, fmt.Sprintf("%s[%d]", where, i), fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// sortedKeys returns m's keys in order, so that errors and missing references come out in
// the same order every time.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// refOf reports whether m is a reference object: exactly one key, "$ref", with a string.
func refOf(m map[string]any) (string, bool) {
	if len(m) != 1 {
		return "", false
	}
	s, ok := m["$ref"].(string)
	return s, ok
}

// Calls returns the plan's calls in order (their indexes are the references' call numbers).
func (p *Plan) Calls() []Call {
	var out []Call
	for _, r := range p.Rounds {
		out = append(out, r...)
	}
	return out
}

// NumCalls is the number of calls in the plan.
func (p *Plan) NumCalls() int {
	n := 0
	for _, r := range p.Rounds {
		n += len(r)
	}
	return n
}

// First is the index of round r's first call.
func (p *Plan) First(r int) int {
	n := 0
	for i := 0; i < r && i < len(p.Rounds); i++ {
		n += len(p.Rounds[i])
	}
	return n
}

// Outputs gives a call's decoded output by call index; ok is false when that call's output is
// not known (the call was skipped, failed or not made yet).
type Outputs func(call int) (output any, ok bool)

// Resolve returns raw with every reference replaced by the value it names. A reference that
// cannot be resolved (its call's output is unknown, or the pointer finds nothing) becomes null,
// and is reported in missing.
func Resolve(raw json.RawMessage, outputs Outputs) (resolved json.RawMessage, missing []string, err error) {
	v, err := decode(raw)
	if err != nil {
		return nil, nil, err
	}
	v = resolve(v, outputs, &missing)
	out, err := jsonfast.Marshal(v)
	if err != nil {
		return nil, missing, err
	}
	return out, missing, nil
}

func resolve(v any, outputs Outputs, missing *[]string) any {
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := refOf(x); ok {
			val, ok := Lookup(ref, outputs)
			if !ok {
				*missing = append(*missing, ref)
				return nil
			}
			return val
		}
		for _, k := range sortedKeys(x) {
			x[k] = resolve(x[k], outputs, missing)
		}
	case []any:
		for i, e := range x {
			x[i] = resolve(e, outputs, missing)
		}
	}
	return v
}

// Lookup returns the value that reference names.
func Lookup(ref string, outputs Outputs) (any, bool) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, false
	}
	v, ok := outputs(r.Call)
	if !ok {
		return nil, false
	}
	for _, tok := range r.Pointer {
		switch x := v.(type) {
		case map[string]any:
			if v, ok = x[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) || tok != strconv.Itoa(i) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// FinalText is the final answer's text: the resolved "final" as a string, or as compact JSON
// when it is not one (a reference that resolves to nothing is "null"), or "Done." when the plan
// has no "final" (or "final": null).
func (p *Plan) FinalText(outputs Outputs) (string, []string, error) {
	if len(p.Final) == 0 || string(bytes.TrimSpace(p.Final)) == "null" {
		return "Done.", nil, nil
	}
	out, missing, err := Resolve(p.Final, outputs)
	if err != nil {
		return "", missing, err
	}
	var s string
	if len(out) > 0 && out[0] == '"' && json.Unmarshal(out, &s) == nil {
		return s, missing, nil
	}
	return string(out), missing, nil
}

// DecodeOutput decodes a tool's output text for references: JSON when it is JSON, else the text
// as a string.
func DecodeOutput(text string) any {
	v, err := decode([]byte(text))
	if err != nil {
		return text
	}
	return v
}

func decode(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if !onlySpace(raw[dec.InputOffset():]) {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

// onlySpace reports whether b is nothing but JSON whitespace.
func onlySpace(b []byte) bool {
	return len(bytes.Trim(b, " \t\r\n")) == 0
}
