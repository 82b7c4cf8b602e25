package verify

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// A verify answer echoes the whole task row and the rollout's response, so reading it is mostly
// checking bytes nobody looks at. parseFast does that in one pass: it checks the syntax of the
// whole answer and keeps only the top-level members it needs, where the first version took four
// passes (json.Valid, json.Unmarshal into a map, a json.Decoder counting the rewards, and the
// syntax check inside each). It accepts exactly what encoding/json accepts (FuzzVerifyScan holds
// it to that); what it does not accept (invalid JSON, another kind of value) goes to parseSlow,
// which words the error, so it cannot change a result, only its cost.

// maxDepth is encoding/json's nesting limit: a value nested deeper is invalid.
const maxDepth = 10000

type scanner struct {
	data []byte
	i    int
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func (s *scanner) skipSpace() {
	for s.i < len(s.data) && isSpace(s.data[s.i]) {
		s.i++
	}
}

// more reads the white space and the separator after a member or an item: true after a comma
// (and the white space after it), false after the closing delimiter; ok false on anything else.
func (s *scanner) more(end byte) (more, ok bool) {
	s.skipSpace()
	if s.i >= len(s.data) {
		return false, false
	}
	switch s.data[s.i] {
	case ',':
		s.i++
		s.skipSpace()
		return true, true
	case end:
		s.i++
		return false, true
	}
	return false, false
}

// value scans one value at s.i (no white space before it), nested depth deep.
func (s *scanner) value(depth int) bool {
	if s.i >= len(s.data) {
		return false
	}
	switch s.data[s.i] {
	case '{':
		if depth+1 > maxDepth {
			return false
		}
		s.i++
		s.skipSpace()
		if s.i < len(s.data) && s.data[s.i] == '}' {
			s.i++
			return true
		}
		for {
			if _, _, ok := s.str(); !ok {
				return false
			}
			s.skipSpace()
			if s.i >= len(s.data) || s.data[s.i] != ':' {
				return false
			}
			s.i++
			s.skipSpace()
			if !s.value(depth + 1) {
				return false
			}
			more, ok := s.more('}')
			if !ok {
				return false
			}
			if !more {
				return true
			}
		}
	case '[':
		if depth+1 > maxDepth {
			return false
		}
		s.i++
		s.skipSpace()
		if s.i < len(s.data) && s.data[s.i] == ']' {
			s.i++
			return true
		}
		for {
			if !s.value(depth + 1) {
				return false
			}
			more, ok := s.more(']')
			if !ok {
				return false
			}
			if !more {
				return true
			}
		}
	case '"':
		_, _, ok := s.str()
		return ok
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	}
	return s.number()
}

func (s *scanner) literal(lit string) bool {
	if len(s.data)-s.i < len(lit) || string(s.data[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *scanner) number() bool {
	d, i := s.data, s.i
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		for i++; i < len(d) && isDigit(d[i]); i++ {
		}
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return false
		}
		for i++; i < len(d) && isDigit(d[i]); i++ {
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return false
		}
		for i++; i < len(d) && isDigit(d[i]); i++ {
		}
	}
	s.i = i
	return true
}

// strPlain are the bytes that stand for themselves in a string: not ", \, a control character
// or part of a multi-byte character.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str scans a string at s.i; plain: it is ASCII without escapes, its bytes are its value.
func (s *scanner) str() (start int, plain, ok bool) {
	d, i := s.data, s.i
	if i >= len(d) || d[i] != '"' {
		return 0, false, false
	}
	start, plain = i, true
	for i++; i < len(d); i++ {
		for i < len(d) && strPlain[d[i]] {
			i++
		}
		if i >= len(d) {
			break
		}
		switch c := d[i]; {
		case c == '"':
			s.i = i + 1
			return start, plain, true
		case c == '\\':
			plain = false
			i++
			if i >= len(d) {
				return 0, false, false
			}
			switch d[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(d)-i <= 4 || !isHex(d[i+1]) || !isHex(d[i+2]) || !isHex(d[i+3]) || !isHex(d[i+4]) {
					return 0, false, false
				}
				i += 4
			default:
				return 0, false, false
			}
		case c < 0x20:
			return 0, false, false
		default: // a byte of a multi-byte character, or not UTF-8
			plain = false
		}
	}
	return 0, false, false
}

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

// members calls fn with each member of the object at s.i (no white space before it); false
// when it is not a valid object.
func (s *scanner) members(fn func(k key, v []byte)) bool {
	if s.i >= len(s.data) || s.data[s.i] != '{' {
		return false
	}
	s.i++
	s.skipSpace()
	if s.i < len(s.data) && s.data[s.i] == '}' {
		s.i++
		return true
	}
	for {
		start, plain, ok := s.str()
		if !ok {
			return false
		}
		k := key{s.data[start:s.i], plain}
		s.skipSpace()
		if s.i >= len(s.data) || s.data[s.i] != ':' {
			return false
		}
		s.i++
		s.skipSpace()
		vstart := s.i
		if !s.value(1) {
			return false
		}
		fn(k, s.data[vstart:s.i:s.i])
		more, ok := s.more('}')
		if !ok {
			return false
		}
		if !more {
			return true
		}
	}
}

// number reads a JSON number as encoding/json reads it into a float64 (ok false where
// json.Unmarshal fails: out of range); v is a valid JSON value.
func number(v []byte) (float64, bool) {
	if len(v) == 0 || v[0] != '-' && !isDigit(v[0]) {
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
	s := scanner{data: answer}
	s.skipSpace()
	rewards := 0
	var reward, rc []byte
	var comps map[string]float64
	if !s.members(func(k key, v []byte) {
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
	}) {
		return nil, errNotRead
	}
	s.skipSpace()
	if s.i != len(answer) {
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
		sub := scanner{data: rc}
		sub.members(func(k key, v []byte) {
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
