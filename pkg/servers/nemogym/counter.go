package nemogym

import (
	"context"
	"math/big"
	"strconv"

	"github.com/rollout-dev/rollout/pkg/servers/gym"
	"github.com/rollout-dev/rollout/pkg/servers/store"
)

// SessionStateMgmt is NeMo Gym's example_session_state_mgmt server (see counter).
var SessionStateMgmt = gym.Builtin{Name: "example_session_state_mgmt", Class: "StatefulCounterResourcesServer", Stateful: true, New: newCounter}

// counter is example_session_state_mgmt (formerly example_stateful_counter): one integer counter
// per session, seeded from the task row's initial_count.
//
//   - seed_session: counter = initial_count, unless the session already has one (setdefault);
//     initial_count defaults to 0 when the row has none.
//   - increment_counter {count}: counter += count (from 0 when unset) → {"success": true}
//   - get_counter_value {}: → {"count": counter} (setting it to 0 when unset)
//   - verify: reward = 1.0 if the session has a counter and it equals expected_count, else 0.0.
//
// A session the server never saw (e.g. a client that lost its cookie) has no counter: reward 0.
// State lives in the server's session store (memory or Redis): it expires TTL after the
// session's last write, or at once on POST /end_session.
type counter struct {
	store store.Store
}

func newCounter(_ string, st store.Store) gym.ResourceServer { return &counter{store: st} }

func (c *counter) Tool(name string) (gym.ToolFunc, bool) {
	switch name {
	case "increment_counter":
		return c.increment, true
	case "get_counter_value":
		return c.get, true
	}
	return nil, false
}

// update applies fn to the session's counter, starting from def when the session has none
// (Python's dict.setdefault), stores the result and returns it. A tool call (seeding false) of
// a seeded session whose counter is gone is a 409 session_not_found: starting it again at def
// would score a lost session as if the model had miscounted.
func (c *counter) update(ctx context.Context, sid string, seeding bool, def *big.Int, fn func(n *big.Int)) (*big.Int, error) {
	var out *big.Int
	err := c.store.Update(ctx, sid, func(old []byte, ok bool) ([]byte, error) {
		if !seeding && gym.LostSession(sid, ok) {
			return nil, gym.ErrSessionLost
		}
		n := new(big.Int).Set(def)
		if ok {
			if _, parsed := n.SetString(string(old), 10); !parsed {
				return nil, &gym.PyError{Class: "ValueError", Msg: "corrupt counter state " + strconv.Quote(string(old))}
			}
		}
		if fn != nil {
			fn(n)
		}
		out = n
		return []byte(n.String()), nil
	})
	return out, err
}

func (c *counter) SeedSession(ctx context.Context, sid string, row *gym.Object) error {
	initial := new(big.Int)
	if raw, ok := row.Get("initial_count"); ok {
		var errs gym.ValidationErrors
		n, ok := gym.LaxInt(raw, []any{"body", "initial_count"}, &errs)
		if !ok {
			return errs
		}
		initial = n
	}
	_, err := c.update(ctx, sid, true, initial, nil)
	return err
}

func (c *counter) increment(ctx context.Context, sid string, body []byte) ([]gym.Field, error) {
	count, err := gym.Arg(body, "count", gym.LaxInt)
	if err != nil {
		return nil, err
	}
	if _, err := c.update(ctx, sid, false, new(big.Int), func(n *big.Int) { n.Add(n, count) }); err != nil {
		return nil, err
	}
	return []gym.Field{{Key: "success", Value: true}}, nil
}

// get takes no arguments; like the FastAPI route without a body model, it ignores the body.
func (c *counter) get(ctx context.Context, sid string, _ []byte) ([]gym.Field, error) {
	n, err := c.update(ctx, sid, false, new(big.Int), nil)
	if err != nil {
		return nil, err
	}
	return []gym.Field{{Key: "count", Value: n}}, nil
}

func (c *counter) Verify(_ context.Context, st gym.SessionState, req *gym.Object, _ []gym.OutputItem, errs *gym.ValidationErrors) ([]gym.Field, error) {
	expected := gym.RequiredAs(req, "expected_count", []any{"body"}, errs, gym.LaxInt)
	if len(*errs) > 0 {
		return nil, nil
	}
	state, ok := st.Data, st.Found
	reward := 0.0
	if n, parsed := new(big.Int).SetString(string(state), 10); ok && parsed && n.Cmp(expected) == 0 {
		reward = 1.0
	}
	return []gym.Field{{Key: "reward", Value: gym.PyFloat(reward)}}, nil
}
