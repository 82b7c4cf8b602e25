package counter

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"

	"github.com/rollout-dev/rollout/pkg/servers/gym"
	"github.com/rollout-dev/rollout/pkg/servers/store"
)

// Builtin is the "counter" resource server (see stateCounter).
var Builtin = gym.Builtin{Name: "counter", Class: "CounterResourcesServer", Stateful: true, New: newStateCounter}

// stateCounter is the "counter" resource server: the stateful pattern done right. It is
// example_session_state_mgmt's task (one integer counter per session) with the failure modes of
// session state made explicit instead of silent.
//
// State. A session's state is one JSON object in the session store (memory, or Redis shared by
// every instance of the server):
//
//	{"count": N, "initial": I, "calls": K, "history": [{"tool": …, "by": …, "count": …}, …]}
//
// calls counts every successful tool call of the session; history keeps the last
// stateCounterHistory of them.
//
//   - POST /seed_session: the task row's initial_count (an int; 0 when absent or null) becomes
//     the session's state, with no calls. Seeding a session that already has state resets it.
//   - POST /increment_counter {"count": int} → {"success": true, "count": new}
//   - POST /decrement_counter {"count": int} → {"success": true, "count": new}
//   - POST /get_counter_value {} → {"count": N}
//   - POST /reset_counter {} → {"success": true, "count": 0}
//   - POST /verify: the task row's expected_count (an int, required) against the session's
//     count. Adds to the echoed request: "reward" (1.0 when the session exists and count ==
//     expected_count, else 0.0), "count_correct" (1 or 0), "tool_calls" (the session's calls),
//     "count" (when the session exists) and, when the reward is 0, "reason":
//     "session_not_found" (no state) or "count_mismatch".
//
// Bad arguments (count missing or not an int, a body that is not a JSON object) are a 422 with
// FastAPI's {"detail": [...]} and change nothing. A tool called on a session that has no state —
// never seeded, its cookie lost, its TTL run out or ended with /end_session — neither crashes nor
// starts a counter at 0 behind the model's back: it is answered 409
// {"error": "session_not_found", "message": "…call seed_session first…"}, so the model (and the
// trajectory) see why; verify then scores 0 with reason "session_not_found".
//
// Cleanup. Every write refreshes the session's TTL in the store, so abandoned state expires TTL
// after its last call; POST /end_session deletes it at once.
type stateCounter struct {
	store store.Store
}

// stateCounterHistory bounds the history kept in a session's state.
const stateCounterHistory = 32

func newStateCounter(_ string, st store.Store) gym.ResourceServer {
	return &stateCounter{store: st}
}

// counterState is a session's state as stored (JSON).
type counterState struct {
	Count   *big.Int       `json:"count"`
	Initial *big.Int       `json:"initial"`
	Calls   int64          `json:"calls"`
	History []counterEvent `json:"history"`
}

// counterEvent is one tool call in counterState.History.
type counterEvent struct {
	Tool  string   `json:"tool"`
	By    *big.Int `json:"by,omitempty"`
	Count *big.Int `json:"count"`
}

// errSessionNotFound answers a tool call on a session without state.
var errSessionNotFound = &sessionNotFoundError{}

type sessionNotFoundError struct{}

func (*sessionNotFoundError) Error() string {
	return "session_not_found: this session has no counter"
}

func (*sessionNotFoundError) StatusBody() (int, []byte) {
	return http.StatusConflict, gym.MarshalFields([]gym.Field{
		{Key: "error", Value: "session_not_found"},
		{Key: "message", Value: "This session has no counter: it was never seeded, its cookie was lost, or it expired or ended. " +
			"Call seed_session first (with the task row), and keep the session cookie for every call."},
	})
}

func decodeCounterState(data []byte) (*counterState, error) {
	var st counterState
	if err := json.Unmarshal(data, &st); err != nil || st.Count == nil {
		return nil, fmt.Errorf("counter: corrupt session state %.80q", data)
	}
	if st.Initial == nil {
		st.Initial = new(big.Int)
	}
	return &st, nil
}

func (c *stateCounter) Tool(name string) (gym.ToolFunc, bool) {
	switch name {
	case "increment_counter":
		return c.add(name, 1), true
	case "decrement_counter":
		return c.add(name, -1), true
	case "get_counter_value":
		return c.get, true
	case "reset_counter":
		return c.reset, true
	}
	return nil, false
}

func (c *stateCounter) SeedSession(ctx context.Context, sid string, row *gym.Object) error {
	initial := new(big.Int)
	if raw, ok := row.Get("initial_count"); ok && !gym.IsNull(raw) {
		var errs gym.ValidationErrors
		n, ok := gym.LaxInt(raw, []any{"body", "initial_count"}, &errs)
		if !ok {
			return errs
		}
		initial = n
	}
	state := encodeSeedState(initial)
	return c.store.Update(ctx, sid, func([]byte, bool) ([]byte, error) { return state, nil })
}

// call applies op to the session's state as one tool call (counted, recorded in the history)
// and returns the new count. A session without state is errSessionNotFound and stays without.
func (c *stateCounter) call(ctx context.Context, sid, tool string, by *big.Int, op func(n *big.Int)) (*big.Int, error) {
	var out *big.Int
	err := c.store.Update(ctx, sid, func(old []byte, ok bool) ([]byte, error) {
		if !ok {
			return nil, errSessionNotFound
		}
		if raw, ok := parseCounterState(old); ok {
			if n, ok := new(big.Int).SetString(string(raw.count), 10); ok {
				op(n)
				out = n
				return nextCounterState(raw, tool, by, n), nil
			}
		}
		st, err := decodeCounterState(old)
		if err != nil {
			return nil, err
		}
		op(st.Count)
		st.Calls++
		st.History = append(st.History, counterEvent{Tool: tool, By: by, Count: st.Count})
		if extra := len(st.History) - stateCounterHistory; extra > 0 {
			st.History = append([]counterEvent(nil), st.History[extra:]...)
		}
		out = new(big.Int).Set(st.Count)
		return json.Marshal(st)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// add is increment_counter (sign 1) and decrement_counter (sign -1).
func (c *stateCounter) add(tool string, sign int64) gym.ToolFunc {
	return func(ctx context.Context, sid string, body []byte) ([]gym.Field, error) {
		by, err := gym.Arg(body, "count", gym.LaxInt)
		if err != nil {
			return nil, err
		}
		delta := new(big.Int).Mul(by, big.NewInt(sign))
		n, err := c.call(ctx, sid, tool, by, func(n *big.Int) { n.Add(n, delta) })
		if err != nil {
			return nil, err
		}
		return []gym.Field{{Key: "success", Value: true}, {Key: "count", Value: n}}, nil
	}
}

// get takes no arguments; like a FastAPI route without a body model, it ignores the body.
func (c *stateCounter) get(ctx context.Context, sid string, _ []byte) ([]gym.Field, error) {
	n, err := c.call(ctx, sid, "get_counter_value", nil, func(*big.Int) {})
	if err != nil {
		return nil, err
	}
	return []gym.Field{{Key: "count", Value: n}}, nil
}

// reset takes no arguments and sets the count to 0.
func (c *stateCounter) reset(ctx context.Context, sid string, _ []byte) ([]gym.Field, error) {
	n, err := c.call(ctx, sid, "reset_counter", nil, func(n *big.Int) { n.SetInt64(0) })
	if err != nil {
		return nil, err
	}
	return []gym.Field{{Key: "success", Value: true}, {Key: "count", Value: n}}, nil
}

func (c *stateCounter) Verify(_ context.Context, st gym.SessionState, req *gym.Object, _ []gym.OutputItem, errs *gym.ValidationErrors) ([]gym.Field, error) {
	expected := gym.RequiredAs(req, "expected_count", []any{"body"}, errs, gym.LaxInt)
	if len(*errs) > 0 {
		return nil, nil
	}
	data, ok := st.Data, st.Found
	if !ok {
		return []gym.Field{
			{Key: "reward", Value: gym.PyFloat(0)},
			{Key: "count_correct", Value: 0},
			{Key: "tool_calls", Value: 0},
			{Key: "reason", Value: "session_not_found"},
		}, nil
	}
	count, calls, err := readCounterState(data)
	if err != nil {
		return nil, err
	}
	if count.Cmp(expected) != 0 {
		return []gym.Field{
			{Key: "reward", Value: gym.PyFloat(0)},
			{Key: "count_correct", Value: 0},
			{Key: "tool_calls", Value: calls},
			{Key: "count", Value: count},
			{Key: "expected_count", Value: expected},
			{Key: "reason", Value: "count_mismatch"},
		}, nil
	}
	return []gym.Field{
		{Key: "reward", Value: gym.PyFloat(1)},
		{Key: "count_correct", Value: 1},
		{Key: "tool_calls", Value: calls},
		{Key: "count", Value: count},
	}, nil
}
