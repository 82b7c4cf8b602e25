package servers

import (
	"context"
	"math/big"
	"strconv"

	"github.com/rollout-dev/rollout/pkg/servers/store"
)

func init() {
	register(builtin{name: "example_session_state_mgmt", class: "StatefulCounterResourcesServer", make: newCounter})
}

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

func newCounter(_ string, st store.Store) ResourceServer { return &counter{store: st} }

func (c *counter) tool(name string) (ToolFunc, bool) {
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
		if !seeding && LostSession(sid, ok) {
			return nil, ErrSessionLost
		}
		n := new(big.Int).Set(def)
		if ok {
			if _, parsed := n.SetString(string(old), 10); !parsed {
				return nil, &PyError{"ValueError", "corrupt counter state " + strconv.Quote(string(old))}
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

func (c *counter) seedSession(ctx context.Context, sid string, row *Object) error {
	initial := new(big.Int)
	if raw, ok := row.Get("initial_count"); ok {
		var errs ValidationErrors
		n, ok := LaxInt(raw, []any{"body", "initial_count"}, &errs)
		if !ok {
			return errs
		}
		initial = n
	}
	_, err := c.update(ctx, sid, true, initial, nil)
	return err
}

func (c *counter) increment(ctx context.Context, sid string, body []byte) ([]Field, error) {
	args, err := ParseBody(body)
	if err != nil {
		return nil, err
	}
	var errs ValidationErrors
	var count *big.Int
	if raw, ok := Required(args, "count", []any{"body"}, &errs); ok {
		count, _ = LaxInt(raw, []any{"body", "count"}, &errs)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if _, err := c.update(ctx, sid, false, new(big.Int), func(n *big.Int) { n.Add(n, count) }); err != nil {
		return nil, err
	}
	return []Field{{"success", true}}, nil
}

// get takes no arguments; like the FastAPI route without a body model, it ignores the body.
func (c *counter) get(ctx context.Context, sid string, _ []byte) ([]Field, error) {
	n, err := c.update(ctx, sid, false, new(big.Int), nil)
	if err != nil {
		return nil, err
	}
	return []Field{{"count", n}}, nil
}

func (c *counter) verify(_ context.Context, st SessionState, req *Object, _ []OutputItem, errs *ValidationErrors) ([]Field, error) {
	var expected *big.Int
	if raw, ok := Required(req, "expected_count", []any{"body"}, errs); ok {
		expected, _ = LaxInt(raw, []any{"body", "expected_count"}, errs)
	}
	if len(*errs) > 0 {
		return nil, nil
	}
	state, ok := st.Data, st.Found
	reward := 0.0
	if n, parsed := new(big.Int).SetString(string(state), 10); ok && parsed && n.Cmp(expected) == 0 {
		reward = 1.0
	}
	return []Field{{"reward", PyFloat(reward)}}, nil
}
