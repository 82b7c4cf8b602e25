package counter

import (
	"math/big"
	"strconv"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// The counter server's state in the session store is json.Marshal(counterState). A tool call
// reads it, adds one history entry and writes it back; verify reads the count and the calls.
// Decoding the whole history (two big.Ints per entry) for that was most of a tool call's cost,
// so the state is read here without encoding/json when it is in the canonical form that
// json.Marshal writes: the history entries are checked and kept as bytes, not decoded. Any other
// form (an older or hand-edited state, corrupt data) goes through encoding/json as before, so
// the answers and the bytes written do not change.

// counterRaw is a state in canonical form, split.
type counterRaw struct {
	count   []byte // canonical integers: -?(0|[1-9][0-9]*), not -0
	initial []byte
	calls   int64
	// kept are the history entries a tool call keeps (the last stateCounterHistory-1), each
	// {"tool":…,"by":…,"count":…} as json.Marshal writes it, with the commas between them.
	kept    []byte
	entries int // the entries in the history
}

// canonReader reads the canonical form; every method fails on anything else.
type canonReader struct {
	data []byte
	i    int
}

func (r *canonReader) lit(s string) bool {
	if len(r.data)-r.i < len(s) || string(r.data[r.i:r.i+len(s)]) != s {
		return false
	}
	r.i += len(s)
	return true
}

// int reads an integer as json.Marshal writes a *big.Int or an int64.
func (r *canonReader) int() ([]byte, bool) {
	d, start := r.data, r.i
	i := start
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		if i > start { // -0 is written 0
			return nil, false
		}
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		for i++; i < len(d) && jsonfast.IsDigit(d[i]); i++ {
		}
	default:
		return nil, false
	}
	r.i = i
	return d[start:i:i], true
}

// str reads a string that json.Marshal writes as it is: printable ASCII without ", \, <, > or &.
func (r *canonReader) str() bool {
	d := r.data
	if r.i >= len(d) || d[r.i] != '"' {
		return false
	}
	for i := r.i + 1; i < len(d); i++ {
		c := d[i]
		if c == '"' {
			r.i = i + 1
			return true
		}
		if !canonChar(c) {
			return false
		}
	}
	return false
}

func canonChar(c byte) bool {
	return 0x20 <= c && c < 0x7f && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}

// parseCounterState splits data when it is a state in canonical form; false otherwise.
func parseCounterState(data []byte) (st counterRaw, ok bool) {
	r := canonReader{data: data}
	if !r.lit(`{"count":`) {
		return st, false
	}
	if st.count, ok = r.int(); !ok {
		return st, false
	}
	if !r.lit(`,"initial":`) {
		return st, false
	}
	if st.initial, ok = r.int(); !ok {
		return st, false
	}
	if !r.lit(`,"calls":`) {
		return st, false
	}
	calls, ok := r.int()
	if !ok {
		return st, false
	}
	var err error
	if st.calls, err = strconv.ParseInt(string(calls), 10, 64); err != nil {
		return st, false
	}
	if !r.lit(`,"history":[`) {
		return st, false
	}
	if !r.lit(`]`) {
		// starts of the last entries: the kept ones begin at the entry stateCounterHistory-1
		// from the end
		var starts [stateCounterHistory - 1]int
		for {
			start := r.i
			starts[st.entries%len(starts)] = start
			if !r.lit(`{"tool":`) || !r.str() {
				return st, false
			}
			if r.lit(`,"by":`) {
				if _, ok := r.int(); !ok {
					return st, false
				}
			}
			if !r.lit(`,"count":`) {
				return st, false
			}
			if _, ok := r.int(); !ok {
				return st, false
			}
			if !r.lit(`}`) {
				return st, false
			}
			st.entries++
			if r.lit(`]`) {
				break
			}
			if !r.lit(`,`) {
				return st, false
			}
		}
		first := starts[0]
		if st.entries > len(starts) {
			first = starts[st.entries%len(starts)]
		}
		st.kept = data[first : r.i-1 : r.i-1]
	}
	if !r.lit(`}`) || r.i != len(data) {
		return st, false
	}
	return st, true
}

// readCounterState is the count and calls of a stored state (decodeCounterState's).
func readCounterState(data []byte) (count *big.Int, calls int64, err error) {
	if raw, ok := parseCounterState(data); ok {
		if n, ok := new(big.Int).SetString(string(raw.count), 10); ok {
			return n, raw.calls, nil
		}
	}
	st, err := decodeCounterState(data)
	if err != nil {
		return nil, 0, err
	}
	return st.Count, st.Calls, nil
}

// encodeSeedState is json.Marshal(counterState{Count: initial, Initial: initial, History:
// []counterEvent{}}).
func encodeSeedState(initial *big.Int) []byte {
	b := append(make([]byte, 0, 64), `{"count":`...)
	b = initial.Append(b, 10)
	b = append(b, `,"initial":`...)
	b = initial.Append(b, 10)
	return append(b, `,"calls":0,"history":[]}`...)
}

// nextCounterState is a tool call on a canonical state: json.Marshal of the state decoded, with
// count set to n, one more call and the entry {tool, by, n} added to the history, the oldest
// entries dropped beyond stateCounterHistory.
func nextCounterState(st counterRaw, tool string, by, n *big.Int) []byte {
	size := 128 + len(st.initial) + 3*len(st.count) + len(st.kept) + len(tool)
	b := append(make([]byte, 0, size), `{"count":`...)
	b = n.Append(b, 10)
	b = append(b, `,"initial":`...)
	b = append(b, st.initial...)
	b = append(b, `,"calls":`...)
	b = strconv.AppendInt(b, st.calls+1, 10)
	b = append(b, `,"history":[`...)
	if len(st.kept) > 0 {
		b = append(append(b, st.kept...), ',')
	}
	b = append(b, `{"tool":`...)
	b = jsonfast.AppendStringHTML(b, tool)
	if by != nil {
		b = append(b, `,"by":`...)
		b = by.Append(b, 10)
	}
	b = append(b, `,"count":`...)
	b = n.Append(b, 10)
	return append(b, "}]}"...)
}
