package verify

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// A verify answer echoes the whole task row and the rollout's response, so reading it is mostly
// checking bytes nobody looks at. parseFast does that in one pass: it checks the syntax of the
// whole answer and keeps only the top-level members it needs, where the first version took four
// passes (json.Valid, json.Unmarshal into a map, a json.Decoder counting the rewards, and the
// syntax check inside each). It accepts exactly what encoding/json accepts (FuzzVerifyScan holds
// it to that); what it does not accept (invalid JSON, another kind of value) goes to parseSlow,
// which words the error, so it cannot change a result, only its cost. The scanning itself is
// internal/jsonfast's.

// key is a member's key: q is the key as written, quotes included.
type key struct {
	q     []byte
	plain bool
}

// is reports whether the key reads as s.
func (k key) is(s string) bool {
	if k.plain {
		return string(k.q[1:len(k.q)-1]) == s
	}
	return k.String() == s
}

// String is the key as encoding/json reads it.
func (k key) String() string {
	if k.plain {
		return string(k.q[1 : len(k.q)-1])
	}
	var s string
	_ = json.Unmarshal(k.q, &s)
	return s
}

// scanMembers calls fn with each member of the object at s's position (no white space before it);
// false when it is not a valid object.
func scanMembers(s *jsonfast.Scanner, fn func(k key, v []byte)) bool {
	return s.MemberValues(func(k []byte, kind jsonfast.Kind, v []byte, _ bool) {
		fn(key{k, kind == 0}, v)
	})
}

// number reads a JSON number as encoding/json reads it into a float64 (ok false where
// json.Unmarshal fails: out of range); v is a valid JSON value.
func number(v []byte) (float64, bool) {
	if len(v) == 0 || v[0] != '-' && !jsonfast.IsDigit(v[0]) {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	return f, err == nil
}

// scalarValue is scalar for a valid JSON value without white space around it.
func scalarValue(v []byte) (float64, bool) {
	switch string(v) {
	case "true":
		return 1, true
	case "false":
		return 0, true
	}
	return number(v)
}

// errNotRead is parseFast's answer to an answer that is not one valid JSON object.
var errNotRead = errors.New("verify: not read")

// parseFast is Parse for an answer that is one valid JSON object; errNotRead for anything else,
// which parseSlow reads.
func parseFast(answer []byte, rowKeys []string) (*Result, error) {
	s := jsonfast.New(answer)
	s.SkipSpace()
	rewards := 0
	var reward, rc []byte
	var comps map[string]float64
	if !scanMembers(&s, func(k key, v []byte) {
		switch {
		case k.is("reward"):
			rewards++
			reward = v
		case k.is("reward_components"):
			rc = v
		case k.is("response") || k.is("responses_create_params"):
		default:
			for _, rk := range rowKeys {
				if k.is(rk) {
					return
				}
			}
			// A repeated key counts as its last value, as in the map json.Unmarshal fills.
			if f, ok := scalarValue(v); ok {
				if comps == nil {
					comps = map[string]float64{}
				}
				comps[k.String()] = f
			} else if comps != nil {
				delete(comps, k.String())
			}
		}
	}) || !s.AtEnd() {
		return nil, errNotRead
	}

	// The checks of parseSlow, in its order.
	if rewards > 1 {
		return nil, &Error{Msg: "the answer has more than one reward: " + snippet(answer)}
	}
	if rewards == 0 || string(reward) == "null" { // null would read as 0
		return nil, &Error{Msg: "the answer has no reward: " + snippet(answer)}
	}
	f, isNum := number(reward)
	if !isNum {
		return nil, &Error{Msg: fmt.Sprintf("reward is %s, want a number", snippet(reward))}
	}
	if rc != nil && string(rc) != "null" {
		if rc[0] != '{' {
			return nil, &Error{Msg: "reward_components is not an object of numbers"}
		}
		// Members in order, a repeated key at its first place with its last value.
		type member struct {
			k string
			v []byte
		}
		var members []member
		sub := jsonfast.New(rc)
		scanMembers(&sub, func(k key, v []byte) {
			ks := k.String()
			for i := range members {
				if members[i].k == ks {
					members[i].v = v
					return
				}
			}
			members = append(members, member{ks, v})
		})
		for _, m := range members {
			if string(m.v) == "null" || m.k == "reward" { // the reward is the answer's own, not a component
				continue
			}
			c, ok := scalarValue(m.v)
			if !ok {
				return nil, &Error{Msg: fmt.Sprintf("reward_components.%s is %s, want a number", m.k, snippet(m.v))}
			}
			if comps == nil {
				comps = map[string]float64{}
			}
			comps[m.k] = c
		}
	}
	if len(comps) == 0 {
		comps = nil
	}
	return &Result{Reward: f, Components: comps, Answer: answer}, nil
}
