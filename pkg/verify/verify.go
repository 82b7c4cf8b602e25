// Package verify turns a finished rollout into a reward: Remote posts the rollout's response
// to the resource server's /verify (NeMo Gym protocol) and Parse reads its answer into the
// reward and its components, with errors that say what the server sent.
package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/rollout-dev/rollout/internal/jsonfast"

	"github.com/rollout-dev/rollout/pkg/record"
)

// Result is a reward with its components.
type Result struct {
	Reward float64
	// Components are the answer's numeric and boolean fields (booleans as
	// 0/1) and its reward_components, except reward itself and the fields
	// the server echoed back from the task row.
	Components map[string]float64
	// Answer is the server's answer as sent.
	Answer json.RawMessage
}

// Poster sends a POST to a resource server within a rollout's session;
// toolclient.Session implements it through PostVerify.
type Poster interface {
	PostVerify(ctx context.Context, body []byte) (status int, answer []byte, err error)
}

// Error is a failed verification: failure class "verify", never reward 0.
type Error struct {
	Status int
	Msg    string
	// Err is the cause when the call itself failed (refused, timed out:
	// errors.Is(err, context.DeadlineExceeded) finds a timeout through it).
	Err error
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("verify: HTTP %d: %s", e.Status, e.Msg)
	}
	return "verify: " + e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// SessionLost reports whether err is a resource server's 409 session_not_found: the server
// seeded the session and no longer has its state (its session store restarted empty, or the
// session's TTL ran out). The rollout did not fail; the infrastructure lost it.
func SessionLost(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusConflict && strings.Contains(e.Msg, "session_not_found")
}

// SessionTampered reports whether err is a resource server's 409 session_tampered: the state the
// session store held for the session carried no valid MAC of the server's (it was altered in
// the store, or copied from another session), so the server refused to score it.
func SessionTampered(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusConflict && strings.Contains(e.Msg, "session_tampered")
}

// Remote posts body (the task row plus "response") to /verify and reads
// the reward. rowKeys are the task row's top-level keys, which the server
// may echo and which are not reward components.
func Remote(ctx context.Context, p Poster, body []byte, rowKeys []string) (*Result, error) {
	status, answer, err := p.PostVerify(ctx, body)
	if err != nil {
		return nil, &Error{Msg: err.Error(), Err: err}
	}
	if status/100 != 2 {
		return nil, &Error{Status: status, Msg: snippet(answer)}
	}
	return Parse(answer, rowKeys)
}

// Parse reads a verify answer: one JSON object with a finite numeric
// "reward", and nothing after it (`{"reward":1} garbage` is a failure, not
// reward 1: the answer was not what the server meant to send). A duplicate
// "reward" key is refused too: JSON readers disagree on which one counts.
//
// A reward (or a component) outside [-MaxAbsReward, MaxAbsReward] is refused too, naming the
// value: no reward function means 1e200, and one such value would make a run's means and
// variances meaningless.
func Parse(answer []byte, rowKeys []string) (*Result, error) {
	r, err := parseFast(answer, rowKeys)
	if err == errNotRead {
		r, err = parseSlow(answer, rowKeys)
	}
	if err != nil {
		return r, err
	}
	if math.Abs(r.Reward) > MaxAbsReward {
		return nil, &Error{Msg: fmt.Sprintf("reward %g is outside the sane range [-%g, %g]", r.Reward, MaxAbsReward, MaxAbsReward)}
	}
	for k, v := range r.Components {
		if math.Abs(v) > MaxAbsReward {
			return nil, &Error{Msg: fmt.Sprintf("reward component %s is %g, outside the sane range [-%g, %g]", k, v, MaxAbsReward, MaxAbsReward)}
		}
	}
	return r, nil
}

// MaxAbsReward bounds the rewards (and reward components) a verify answer may give.
const MaxAbsReward = 1e6

// parseSlow is Parse by encoding/json alone, several passes over the answer: for answers that
// are not one valid JSON object, whose errors it words, parseFast hands them here.
func parseSlow(answer []byte, rowKeys []string) (*Result, error) {
	if !json.Valid(answer) {
		return nil, &Error{Msg: fmt.Sprintf("the answer is not valid JSON (%s): %s", syntaxError(answer), snippet(answer))}
	}
	if k := jsonfast.TypeName(answer); k != "an object" {
		return nil, &Error{Msg: fmt.Sprintf("the answer is %s, not a JSON object: %s", k, snippet(answer))}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(answer, &fields); err != nil { // cannot fail on a valid object
		return nil, &Error{Msg: fmt.Sprintf("the answer is not a JSON object (%v): %s", err, snippet(answer))}
	}
	if n := countKey(answer, "reward"); n > 1 {
		return nil, &Error{Msg: "the answer has more than one reward: " + snippet(answer)}
	}
	raw, ok := fields["reward"]
	if !ok || isNull(raw) { // null would read as 0
		return nil, &Error{Msg: "the answer has no reward: " + snippet(answer)}
	}
	var reward float64
	if err := json.Unmarshal(raw, &reward); err != nil {
		return nil, &Error{Msg: fmt.Sprintf("reward is %s, want a number", snippet(raw))}
	}
	if math.IsNaN(reward) || math.IsInf(reward, 0) {
		return nil, &Error{Msg: "reward is not a finite number"}
	}
	skip := map[string]bool{"reward": true, "reward_components": true, "response": true, "responses_create_params": true}
	for _, k := range rowKeys {
		skip[k] = true
	}
	comps := map[string]float64{}
	for k, v := range fields {
		if skip[k] {
			continue
		}
		if f, ok := scalar(v); ok {
			comps[k] = f
		}
	}
	if raw, ok := fields["reward_components"]; ok && string(raw) != "null" {
		var rc map[string]json.RawMessage
		if err := json.Unmarshal(raw, &rc); err != nil {
			return nil, &Error{Msg: "reward_components is not an object of numbers"}
		}
		for k, v := range rc {
			if isNull(v) || k == "reward" { // the reward is the answer's own, not a component
				continue
			}
			f, ok := scalar(v)
			if !ok {
				return nil, &Error{Msg: fmt.Sprintf("reward_components.%s is %s, want a number", k, snippet(v))}
			}
			comps[k] = f
		}
	}
	if len(comps) == 0 {
		comps = nil
	}
	return &Result{Reward: reward, Components: comps, Answer: answer}, nil
}

// scalar reads a JSON number or boolean (true 1, false 0).
func scalar(v json.RawMessage) (float64, bool) {
	switch s := strings.TrimSpace(string(v)); s {
	case "true":
		return 1, true
	case "false":
		return 0, true
	case "null":
		return 0, false // json.Unmarshal would leave 0 and no error
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// syntaxError says where and why answer is not one JSON value.
func syntaxError(answer []byte) string {
	if len(bytes.TrimSpace(answer)) == 0 {
		return "empty"
	}
	var v json.RawMessage
	err := json.Unmarshal(answer, &v)
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return fmt.Sprint(err)
	}
	msg := strings.TrimPrefix(se.Error(), "json: ")
	switch {
	case strings.Contains(msg, "after top-level value"):
		return fmt.Sprintf("trailing data after the JSON value at byte %d", se.Offset-1)
	case strings.Contains(msg, "unexpected end of JSON input") || (se.Offset >= int64(len(answer)) && strings.Contains(msg, "invalid character ' '")):
		return "truncated: unexpected end of JSON input"
	}
	return fmt.Sprintf("%s at byte %d", msg, max(se.Offset-1, 0))
}

// countKey counts the top-level members named key of a valid JSON object.
func countKey(obj []byte, key string) int {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil { // {
		return 0
	}
	n := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return n
		}
		if k, _ := tok.(string); k == key {
			n++
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return n
		}
	}
	return n
}

// IsError reports whether err is a verification failure.
func IsError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

func isNull(v json.RawMessage) bool { return strings.TrimSpace(string(v)) == "null" }

func snippet(b []byte) string { return record.Clip(string(b), 300) }
