package counter

import (
	"bytes"
	"encoding/json"
	"math/big"
	"strings"
	"testing"
)

// oldCall is stateCounter.call's state update as it was, by encoding/json alone.
func oldCall(old []byte, tool string, by *big.Int, op func(*big.Int)) (*big.Int, []byte, error) {
	st, err := decodeCounterState(old)
	if err != nil {
		return nil, nil, err
	}
	op(st.Count)
	st.Calls++
	st.History = append(st.History, counterEvent{Tool: tool, By: by, Count: st.Count})
	if extra := len(st.History) - stateCounterHistory; extra > 0 {
		st.History = append([]counterEvent(nil), st.History[extra:]...)
	}
	out := new(big.Int).Set(st.Count)
	data, err := json.Marshal(st)
	return out, data, err
}

// canonicalState is json.Marshal of a state with history entries.
func canonicalState(t testing.TB, count, initial, calls int64, entries int) []byte {
	st := counterState{Count: big.NewInt(count), Initial: big.NewInt(initial), Calls: calls, History: []counterEvent{}}
	for i := range entries {
		ev := counterEvent{Tool: "increment_counter", By: big.NewInt(int64(i % 3)), Count: big.NewInt(int64(i))}
		if i%4 == 3 {
			ev = counterEvent{Tool: "get_counter_value", Count: big.NewInt(-int64(i))}
		}
		st.History = append(st.History, ev)
	}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// FuzzCounterState holds the counter state's fast reader and writer to encoding/json: whatever
// the stored bytes, a state it reads is read as encoding/json reads it, and the state a tool
// call writes is byte for byte what encoding/json wrote.
func FuzzCounterState(f *testing.F) {
	for _, n := range []int{0, 1, stateCounterHistory - 1, stateCounterHistory, stateCounterHistory + 5} {
		f.Add(canonicalState(f, 7, 3, int64(n), n), int64(2), uint8(0))
	}
	for _, s := range []string{
		string(encodeSeedState(big.NewInt(-12))),
		`{"count":12345678901234567890123,"initial":-5,"calls":9223372036854775807,"history":[]}`,
		`{"count":-0,"initial":0,"calls":0,"history":[]}`,
		`{"count":1,"initial":0,"calls":-0,"history":[]}`,
		`{"count":1,"initial":0,"calls":99999999999999999999,"history":[]}`,
		`{"count":1,"initial":0,"calls":0,"history":null}`,
		`{"count":1,"initial":0,"calls":0}`,
		`{"count":1,"calls":0,"history":[]}`,
		`{"count":1, "initial":0,"calls":0,"history":[]}`,
		`{"Count":1,"initial":0,"calls":0,"history":[]}`,
		`{"count":1.0,"initial":0,"calls":0,"history":[]}`,
		`{"count":null,"initial":0,"calls":0,"history":[]}`,
		`{"count":1,"initial":0,"calls":0,"history":[{"tool":"a<b","count":1}]}`,
		`{"count":1,"initial":0,"calls":0,"history":[{"tool":"\u0061","count":1}]}`,
		`{"count":1,"initial":0,"calls":0,"history":[{"tool":"x","by":null,"count":1}]}`,
		`{"count":1,"initial":0,"calls":0,"history":[{"tool":"x","by":01,"count":1}]}`,
		`{"count":1,"initial":0,"calls":0,"history":[{"tool":"x","count":1},]}`,
		`{"count":1,"initial":0,"calls":0,"history":[{"tool":"x","count":1}]} `,
		`{"count":1,"initial":0,"calls":0,"history":[{"tool":"x","count":1,"extra":2}]}`,
		`{"count":1,"initial":0,"calls":0,"history":[{"tool":1,"count":1}]}`,
		`garbage`, ``, `5`,
	} {
		f.Add([]byte(s), int64(-1), uint8(1))
	}
	f.Fuzz(func(t *testing.T, old []byte, by int64, toolKind uint8) {
		count, calls, err := readCounterState(old)
		st, oldErr := decodeCounterState(old)
		if (err == nil) != (oldErr == nil) {
			t.Fatalf("readCounterState(%q) err %v, decodeCounterState %v", old, err, oldErr)
		}
		if err == nil && (count.Cmp(st.Count) != 0 || calls != st.Calls) {
			t.Fatalf("readCounterState(%q) = %v %d, decodeCounterState %v %d", old, count, calls, st.Count, st.Calls)
		}

		tool, byN := []string{"increment_counter", "get_counter_value", "reset_counter", "a<b\"é"}[toolKind%4], big.NewInt(by)
		op := func(n *big.Int) { n.Add(n, byN) }
		if toolKind%4 == 1 {
			byN, op = nil, func(*big.Int) {}
		}
		raw, ok := parseCounterState(old)
		if !ok {
			return
		}
		if oldErr != nil {
			t.Fatalf("parseCounterState(%q) took a state encoding/json refuses: %v", old, oldErr)
		}
		n, _ := new(big.Int).SetString(string(raw.count), 10)
		op(n)
		got := nextCounterState(raw, tool, byN, n)
		wantN, want, err := oldCall(old, tool, byN, op)
		if err != nil || !bytes.Equal(got, want) || n.Cmp(wantN) != 0 {
			t.Fatalf("call on %q:\n%s (%v)\nwant\n%s (%v) %v", old, got, n, want, wantN, err)
		}
	})
}

// The seed state and a run of tool calls through the handler leave the state json.Marshal wrote.
func TestCounterStateCanonical(t *testing.T) {
	for _, initial := range []string{"0", "-3", "98765432109876543210"} {
		n, _ := new(big.Int).SetString(initial, 10)
		want, _ := json.Marshal(counterState{Count: n, Initial: n, History: []counterEvent{}})
		if got := encodeSeedState(n); !bytes.Equal(got, want) {
			t.Errorf("encodeSeedState(%s) = %s, want %s", initial, got, want)
		}
	}
	state := encodeSeedState(big.NewInt(4))
	for i := range 2*stateCounterHistory + 3 {
		raw, ok := parseCounterState(state)
		if !ok {
			t.Fatalf("call %d: state %s is not canonical", i, state)
		}
		by := big.NewInt(int64(i - 20))
		n, _ := new(big.Int).SetString(string(raw.count), 10)
		n.Add(n, by)
		next := nextCounterState(raw, "increment_counter", by, n)
		_, want, err := oldCall(state, "increment_counter", by, func(n *big.Int) { n.Add(n, by) })
		if err != nil || !bytes.Equal(next, want) {
			t.Fatalf("call %d:\n%s\nwant\n%s", i, next, want)
		}
		state = next
	}
	if h := strings.Count(string(state), `"tool"`); h != stateCounterHistory {
		t.Fatalf("%d history entries, want %d: %s", h, stateCounterHistory, state)
	}
}
