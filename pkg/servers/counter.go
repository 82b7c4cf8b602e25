package servers

import (
	"math/big"
	"sync"
)

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
// Like the Python, state is kept for the life of the server.
type counter struct {
	mu     sync.Mutex
	counts map[string]*big.Int
}

func newCounter(string) resourceServer { return &counter{counts: map[string]*big.Int{}} }

func (c *counter) tool(name string) (toolFunc, bool) {
	switch name {
	case "increment_counter":
		return c.increment, true
	case "get_counter_value":
		return c.get, true
	}
	return nil, false
}

// setdefault is Python's dict.setdefault on the counters; c.mu must be held.
func (c *counter) setdefault(sid string, v *big.Int) *big.Int {
	if n, ok := c.counts[sid]; ok {
		return n
	}
	n := new(big.Int).Set(v)
	c.counts[sid] = n
	return n
}

func (c *counter) seedSession(sid string, row *object) error {
	initial := new(big.Int)
	if raw, ok := row.get("initial_count"); ok {
		var errs validationErrors
		n, ok := laxInt(raw, []any{"body", "initial_count"}, &errs)
		if !ok {
			return errs
		}
		initial = n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setdefault(sid, initial)
	return nil
}

func (c *counter) increment(sid string, body []byte) ([]field, error) {
	args, err := parseBodyObject(body)
	if err != nil {
		return nil, err
	}
	var errs validationErrors
	var count *big.Int
	if raw, ok := required(args, "count", []any{"body"}, &errs); ok {
		count, _ = laxInt(raw, []any{"body", "count"}, &errs)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.setdefault(sid, new(big.Int))
	n.Add(n, count)
	return []field{{"success", true}}, nil
}

// get takes no arguments; like the FastAPI route without a body model, it ignores the body.
func (c *counter) get(sid string, _ []byte) ([]field, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := new(big.Int).Set(c.setdefault(sid, new(big.Int)))
	return []field{{"count", n}}, nil
}

func (c *counter) verify(sid string, req *object, _ []outputItem, errs *validationErrors) ([]field, error) {
	var expected *big.Int
	if raw, ok := required(req, "expected_count", []any{"body"}, errs); ok {
		expected, _ = laxInt(raw, []any{"body", "expected_count"}, errs)
	}
	if len(*errs) > 0 {
		return nil, nil
	}
	reward := 0.0
	c.mu.Lock()
	if n, ok := c.counts[sid]; ok && n.Cmp(expected) == 0 {
		reward = 1.0
	}
	c.mu.Unlock()
	return []field{{"reward", pyFloat(reward)}}, nil
}
