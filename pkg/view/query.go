package view

import (
	"cmp"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Query is a filtered, sorted page of the rollouts table, as the Rollouts page's URL says it.
type Query struct {
	Run       int     // -1: every run
	Arm       string  // "": every arm
	Term      string  // termination; "": any
	Fail      string  // failure class; "": any; "-": none (the rollouts that did not fail)
	Group     string  // the group-by field's value; "": any
	Endpoint  string  // the endpoint of a pool that answered; "": any
	Text      string  // a substring of the task id
	Min, Max  float64 // reward range (NaN: unbounded); a bound leaves out rollouts without a reward
	Sort      string  // a column of sortKeys
	Desc      bool
	Page      int // from 0
	PageSize  int
	hasBounds bool
}

// sortKeys are the columns the table sorts by.
var sortKeys = []string{"task", "repeat", "arm", "reward", "termination", "failure", "rounds", "tool_calls", "tokens", "latency"}

// DefaultPageSize is the number of rows a page of the table shows.
const DefaultPageSize = 50

// AllRollouts is the query of the whole table, unfiltered, by task, its first page: the one to
// start a link's query from (a zero Query is not it: its bounds and page size are 0).
func AllRollouts() Query {
	return Query{Run: -1, Min: math.NaN(), Max: math.NaN(), Sort: "task", PageSize: DefaultPageSize}
}

// allWith is AllRollouts changed by set.
func allWith(set func(*Query)) Query {
	q := AllRollouts()
	set(&q)
	return q
}

// ParseQuery reads a query from a URL's values; an error names the parameter.
func ParseQuery(v url.Values, runs int) (Query, error) {
	q := Query{Run: -1, Arm: v.Get("arm"), Term: v.Get("termination"), Fail: v.Get("failure"), Group: v.Get("group"),
		Endpoint: v.Get("endpoint"), Text: v.Get("q"), Min: math.NaN(), Max: math.NaN(), Sort: v.Get("sort"), Desc: v.Get("desc") == "1", PageSize: DefaultPageSize}
	if s := v.Get("run"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n >= runs {
			return q, fmt.Errorf("run %q: want a run number from 0 to %d", s, runs-1)
		}
		q.Run = n
	}
	for _, b := range []struct {
		name string
		dst  *float64
	}{{"min", &q.Min}, {"max", &q.Max}} {
		if s := strings.TrimSpace(v.Get(b.name)); s != "" {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsNaN(f) {
				return q, fmt.Errorf("%s %q: want a number", b.name, s)
			}
			*b.dst, q.hasBounds = f, true
		}
	}
	if q.Sort == "" {
		q.Sort = "task"
	}
	if !slices.Contains(sortKeys, q.Sort) {
		return q, fmt.Errorf("sort %q: want one of %s", q.Sort, strings.Join(sortKeys, ", "))
	}
	for _, p := range []struct {
		name string
		dst  *int
		min  int
	}{{"page", &q.Page, 0}, {"size", &q.PageSize, 1}} {
		if s := v.Get(p.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < p.min {
				return q, fmt.Errorf("%s %q: want a whole number from %d", p.name, s, p.min)
			}
			*p.dst = n
		}
	}
	q.PageSize = min(q.PageSize, 1000)
	return q, nil
}

// Values is the query as URL values (defaults left out), for links.
func (q Query) Values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Run >= 0 {
		v.Set("run", strconv.Itoa(q.Run))
	}
	set("arm", q.Arm)
	set("termination", q.Term)
	set("failure", q.Fail)
	set("group", q.Group)
	set("endpoint", q.Endpoint)
	set("q", q.Text)
	if q.hasBounds && !math.IsNaN(q.Min) {
		v.Set("min", strconv.FormatFloat(q.Min, 'g', -1, 64))
	}
	if q.hasBounds && !math.IsNaN(q.Max) {
		v.Set("max", strconv.FormatFloat(q.Max, 'g', -1, 64))
	}
	if q.Sort != "task" && q.Sort != "" {
		v.Set("sort", q.Sort)
	}
	if q.Desc {
		v.Set("desc", "1")
	}
	if q.Page > 0 {
		v.Set("page", strconv.Itoa(q.Page))
	}
	if q.PageSize > 0 && q.PageSize != DefaultPageSize {
		v.Set("size", strconv.Itoa(q.PageSize))
	}
	return v
}

// selection is the result of a query without its paging: the matching rows in order.
type selection struct {
	key  string // the query's filter and sort, as URL text
	rows []int32
}

// selector remembers the last selection, so that paging through it does not filter and sort
// a large table again.
type selector struct {
	mu   sync.Mutex
	last *selection
}

// Select returns the rows of q's filter in q's order (all pages), and how many there are.
func (d *Data) Select(q Query) []int32 {
	p := q
	p.Page, p.PageSize = 0, DefaultPageSize
	key := p.Values().Encode()
	d.sel.mu.Lock()
	defer d.sel.mu.Unlock()
	if l := d.sel.last; l != nil && l.key == key {
		return l.rows
	}
	rows := d.filter(q)
	d.sortRows(rows, q.Sort, q.Desc)
	d.sel.last = &selection{key: key, rows: rows}
	return rows
}

// filter returns the rows that match q, in table order.
func (d *Data) filter(q Query) []int32 {
	const none = math.MaxUint32
	want := func(s string) uint32 { // the interned number of s, none if no row has it
		if i, ok := d.s.index[s]; ok {
			return i
		}
		return none
	}
	arm, term, fail, endpoint := want(q.Arm), want(q.Term), want(q.Fail), want(q.Endpoint)
	if q.Fail == "-" {
		fail = want("")
	}
	var out []int32
	for i := range d.rows {
		r := &d.rows[i]
		switch {
		case q.Run >= 0 && int(r.run) != q.Run,
			q.Arm != "" && r.arm != arm,
			q.Term != "" && r.term != term,
			q.Fail != "" && r.fail != fail,
			q.Endpoint != "" && r.endpoint != endpoint,
			q.hasBounds && (!r.hasReward || d.s.get(r.fail) != "" || r.reward < q.Min || r.reward > q.Max),
			q.Text != "" && !strings.Contains(d.s.get(r.id), q.Text),
			q.Group != "" && d.group(i) != q.Group:
			continue
		}
		out = append(out, int32(i))
	}
	return out
}

// sortRows sorts row numbers by a column, ties by task, repeat, arm and run.
func (d *Data) sortRows(rows []int32, by string, desc bool) {
	str := func(i uint32) string { return d.s.get(i) }
	key := func(a, b *row) int {
		switch by {
		case "repeat":
			return cmp.Compare(a.rollout, b.rollout)
		case "arm":
			return strings.Compare(str(a.arm), str(b.arm))
		case "reward":
			// Rollouts without a reward sort below every reward.
			if a.hasReward != b.hasReward || !a.hasReward {
				if a.hasReward {
					return 1
				} else if b.hasReward {
					return -1
				}
				return 0
			}
			return cmp.Compare(a.reward, b.reward)
		case "termination":
			return strings.Compare(str(a.term), str(b.term))
		case "failure":
			return strings.Compare(str(a.fail), str(b.fail))
		case "rounds":
			return cmp.Compare(a.rounds, b.rounds)
		case "tool_calls":
			return cmp.Compare(a.toolCalls, b.toolCalls)
		case "tokens":
			return cmp.Compare(a.prompt+a.compl, b.prompt+b.compl)
		case "latency":
			return cmp.Compare(a.latencyMs, b.latencyMs)
		}
		return 0
	}
	slices.SortFunc(rows, func(i, j int32) int {
		a, b := &d.rows[i], &d.rows[j]
		c := key(a, b)
		if desc {
			c = -c
		}
		return cmp.Or(c, cmp.Compare(a.task, b.task), cmp.Compare(a.rollout, b.rollout),
			strings.Compare(str(a.arm), str(b.arm)), cmp.Compare(a.run, b.run))
	})
}
