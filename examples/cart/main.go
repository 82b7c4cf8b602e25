// Command cart is a benchmark's resource server in one file (docs/own-benchmark.md): a shopping
// cart whose tools change a session's state, and whose /verify scores the order placed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"

	"github.com/rollout-dev/rollout/pkg/servers/gym"
	"github.com/rollout-dev/rollout/pkg/servers/store"
)

type cart struct { // a session's state: the task's prices, the cart's total, the order (nil before)
	Prices  map[string]int `json:"prices"`
	Total   int            `json:"total"`
	Ordered *int           `json:"ordered"`
}

type server struct{ st store.Store } // update changes a session's cart atomically (409 if never seeded)

func (s *server) update(ctx context.Context, sid string, fn func(c *cart) ([]gym.Field, error)) (out []gym.Field, err error) {
	err = s.st.Update(ctx, sid, func(old []byte, ok bool) ([]byte, error) {
		var c cart
		if !ok || json.Unmarshal(old, &c) != nil {
			return nil, &gym.DetailError{Status: http.StatusConflict, Detail: "no cart: call seed_session first"}
		}
		if out, err = fn(&c); err != nil {
			return nil, err
		}
		return json.Marshal(c)
	})
	return out, err
}

// Tool serves add_to_cart {"item": string, "quantity": int} (bad arguments: 422) and checkout {}.
func (s *server) Tool(name string) (gym.ToolFunc, bool) {
	f, ok := map[string]gym.ToolFunc{"add_to_cart": s.add, "checkout": s.checkout}[name]
	return f, ok
}

func (s *server) add(ctx context.Context, sid string, body []byte) ([]gym.Field, error) {
	item, err := gym.Arg(body, "item", gym.LaxString)
	n, err2 := gym.Arg(body, "quantity", gym.LaxInt)
	if err := errors.Join(err, err2); err != nil {
		return nil, err
	}
	return s.update(ctx, sid, func(c *cart) ([]gym.Field, error) {
		price, ok := c.Prices[item]
		if !ok || n.Sign() < 1 || !n.IsInt64() {
			return nil, &gym.DetailError{Status: http.StatusNotFound, Detail: fmt.Sprintf("cannot add %v of %q", n, item)}
		}
		c.Total += price * int(n.Int64())
		return []gym.Field{{Key: "item", Value: item}, {Key: "cart_total", Value: c.Total}}, nil
	})
}

func (s *server) checkout(ctx context.Context, sid string, _ []byte) ([]gym.Field, error) {
	return s.update(ctx, sid, func(c *cart) ([]gym.Field, error) {
		c.Ordered = &c.Total
		return []gym.Field{{Key: "total", Value: c.Total}}, nil
	})
}

// SeedSession puts the task row's prices in a new, empty cart.
func (s *server) SeedSession(ctx context.Context, sid string, row *gym.Object) error {
	c := cart{Prices: map[string]int{}}
	if raw, ok := row.Get("prices"); !ok || json.Unmarshal(raw, &c.Prices) != nil {
		return &gym.DetailError{Status: http.StatusUnprocessableEntity, Detail: "the task row needs prices: {item: price}"}
	}
	return s.st.Update(ctx, sid, func([]byte, bool) ([]byte, error) { return json.Marshal(c) })
}

// Verify scores 1 when the order placed has the row's expected_total, else 0 (no such field: 422).
func (s *server) Verify(_ context.Context, st gym.SessionState, req *gym.Object, _ []gym.OutputItem, errs *gym.ValidationErrors) ([]gym.Field, error) {
	want := gym.RequiredAs(req, "expected_total", []any{"body"}, errs, gym.LaxInt)
	var c cart
	if len(*errs) > 0 || !st.Found || json.Unmarshal(st.Data, &c) != nil || c.Ordered == nil {
		return []gym.Field{{Key: "reward", Value: gym.PyFloat(0)}, {Key: "reason", Value: "no order placed"}}, nil
	}
	ok := want.IsInt64() && want.Int64() == int64(*c.Ordered)
	return []gym.Field{{Key: "reward", Value: gym.PyFloat(map[bool]float64{true: 1}[ok])}, {Key: "ordered_total", Value: *c.Ordered}}, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "listen on `HOST:PORT`")
	flag.Parse()
	srv, err := gym.New(context.Background(), gym.Builtin{Name: "cart", Class: "CartResourcesServer", Stateful: true,
		New: func(_ string, st store.Store) gym.ResourceServer { return &server{st} }}, gym.Options{})
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe(*addr, srv)) // rollout run --server http://ADDR

}
