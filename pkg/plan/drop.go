package plan

import (
	"encoding/json"
	"fmt"
)

// Drop returns a copy of the plan without call i (its index in plan order): later calls are
// renumbered, references to the dropped call become null, and a round left empty is removed.
// It is how the oracle check proves that a call is needed.
func (p *Plan) Drop(i int) (*Plan, error) {
	if i < 0 || i >= p.NumCalls() {
		return nil, fmt.Errorf("plan: no call %d (the plan has %d)", i, p.NumCalls())
	}
	out := &Plan{}
	n := 0
	for _, round := range p.Rounds {
		var kept []Call
		for _, c := range round {
			if n != i {
				args, err := renumber(c.Arguments, i)
				if err != nil {
					return nil, err
				}
				c.Arguments = args
				kept = append(kept, c)
			}
			n++
		}
		if len(kept) > 0 {
			out.Rounds = append(out.Rounds, kept)
		}
	}
	if len(p.Final) > 0 {
		f, err := renumber(p.Final, i)
		if err != nil {
			return nil, err
		}
		out.Final = f
	}
	if len(out.Rounds) == 0 {
		return nil, fmt.Errorf("plan: dropping call %d leaves no calls", i)
	}
	return out, nil
}

// renumber rewrites the references in raw for the removal of call i.
func renumber(raw json.RawMessage, i int) (json.RawMessage, error) {
	v, err := decode(raw)
	if err != nil {
		return nil, err
	}
	v = renumberValue(v, i)
	return json.Marshal(v)
}

func renumberValue(v any, i int) any {
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := refOf(x); ok {
			r, err := ParseRef(ref)
			switch {
			case err != nil:
				return x
			case r.Call == i:
				return nil
			case r.Call > i:
				r.Call--
				return map[string]any{"$ref": r.String()}
			}
			return x
		}
		for k, e := range x {
			x[k] = renumberValue(e, i)
		}
	case []any:
		for k, e := range x {
			x[k] = renumberValue(e, i)
		}
	}
	return v
}

// Required lists the indexes of the calls not marked optional.
func (p *Plan) Required() []int {
	var out []int
	for i, c := range p.Calls() {
		if !c.Optional {
			out = append(out, i)
		}
	}
	return out
}
