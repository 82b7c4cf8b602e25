// Package view shows runs' results as web pages: an overview with the statistics drawn as SVG
// charts, the rollouts table (filtered, sorted and paged on the server), each rollout's
// transcript and the comparison of two arms or runs. Handler serves them (rollout view);
// WriteHTML writes the overview, the comparisons and a sample of transcripts as one file that
// opens offline (rollout report --html). Pages have no script: everything is drawn on the server
// and escaped by html/template, and the server answers GET and HEAD only.
package view

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/rollout-dev/rollout/internal/localserve"
)

//go:embed assets/style.css assets/pages.html
var assets embed.FS

// csp allows the pages nothing but their own inline styles, data: images (the favicon) and
// forms to the same origin: no script runs, whatever a transcript holds.
// The header adds frame-ancestors, which a <meta> cannot carry.
const csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; base-uri 'none'"

var (
	pagesOnce sync.Once
	pages     *template.Template
	pagesErr  error
)

func templates() (*template.Template, error) {
	pagesOnce.Do(func() {
		css, err := assets.ReadFile("assets/style.css")
		if err != nil {
			pagesErr = err
			return
		}
		pages, pagesErr = template.New("pages.html").Funcs(template.FuncMap{
			"css":  func() template.CSS { return template.CSS(css) }, // our own file, not input
			"csp":  func() string { return csp },
			"f1":   func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
			"add":  func(a, b int) int { return a + b },
			"pct":  func(a, b int) string { return pct(a, b) },
			"join": strings.Join,
			"add0": func(a, b float64) float64 { return a + b },
			"sub0": func(a, b float64) float64 { return a - b },
			"num": func(s string) string { // an exact number's text, shortened for a label
				v, err := strconv.ParseFloat(s, 64)
				if err != nil {
					return s
				}
				return num(v)
			},
			"num0":  num,
			"list1": func(first ArmRow, rest []ArmRow) []ArmRow { return append([]ArmRow{first}, rest...) },
		}).ParseFS(assets, "assets/pages.html")
	})
	return pages, pagesErr
}

func pct(a, b int) string {
	if b == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(a)/float64(b), 'f', 1, 64) + "%"
}

// Page is what the layout template gets: the page's title, kind and data.
type Page struct {
	Title  string
	Kind   string // overview, rollouts, trajectory, compare, pair, report
	Static bool   // the one-file report
	// Refresh, when set, makes the page reload itself after that many seconds (a meta
	// refresh, which the pages' CSP allows: no script): the overview of a run being written.
	Refresh int
	Nav     []Link
	Data    any
}

// Handler serves the pages of d. Only GET and HEAD are answered; no path of the request
// reaches the file system (runs are named by their number).
type Handler struct {
	d    *Data
	mux  *http.ServeMux
	once sync.Once
	ov   *Overview
	// compared keeps the comparisons made (at most maxCompared): one of a 10^6-rollout run
	// takes seconds.
	mu       sync.Mutex
	compared map[[2]Side]*Comparison
	// Hosts, when set, are the host names (any port) the server answers (against DNS
	// rebinding: a page of another site must not reach a loopback server by a name of its own).
	Hosts []string
}

// NewHandler returns the web app over d.
func NewHandler(d *Data) (*Handler, error) {
	if _, err := templates(); err != nil {
		return nil, err
	}
	h := &Handler{d: d, mux: http.NewServeMux()}
	h.mux.HandleFunc("/{$}", h.overview)
	h.mux.HandleFunc("/rollouts", h.rollouts)
	h.mux.HandleFunc("/trajectory", h.trajectory)
	h.mux.HandleFunc("/compare", h.compare)
	h.mux.HandleFunc("/pair", h.pair)
	return h, nil
}

// maxCompared is how many comparisons a Handler keeps.
const maxCompared = 16

// LoopbackHosts are the host names of a server on a loopback address (localserve.Hosts).
func LoopbackHosts(addr string) []string { return localserve.Hosts(addr) }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", csp+"; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "rollout view answers GET and HEAD only", http.StatusMethodNotAllowed)
		return
	}
	if len(h.Hosts) > 0 && !localserve.HostAllowed(h.Hosts, r.Host) {
		http.Error(w, fmt.Sprintf("host %q is not this server's", r.Host), http.StatusMisdirectedRequest)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// serverLinks are the server's URLs.
type serverLinks struct{}

func (serverLinks) rollouts(q Query) string {
	if e := q.Values().Encode(); e != "" {
		return "/rollouts?" + e
	}
	return "/rollouts"
}

func keyValues(v url.Values, prefix string, k Key) {
	v.Set(prefix+"run", strconv.Itoa(k.Run))
	v.Set(prefix+"task", strconv.FormatInt(k.Task, 10))
	v.Set(prefix+"repeat", strconv.FormatInt(k.Rollout, 10))
	v.Set(prefix+"arm", k.Arm)
}

func (serverLinks) trajectory(k Key) string {
	v := url.Values{}
	keyValues(v, "", k)
	return "/trajectory?" + v.Encode()
}

func (serverLinks) compare(a, b Side) string {
	return "/compare?" + url.Values{"a": {a.String()}, "b": {b.String()}}.Encode()
}

func (serverLinks) pair(a, b Key) string {
	v := url.Values{}
	keyValues(v, "a.", a)
	keyValues(v, "b.", b)
	return "/pair?" + v.Encode()
}

func (h *Handler) nav() []Link {
	l := serverLinks{}
	nav := []Link{{"Overview", "/"}, {"Rollouts", l.rollouts(AllRollouts())}}
	if p := h.d.defaultPairs(); len(p) > 0 {
		nav = append(nav, Link{"Compare", l.compare(p[0][0], p[0][1])})
	}
	return nav
}

func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, p Page) {
	p.Nav = h.nav()
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, "layout", p); err != nil {
		http.Error(w, "rendering the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(b.Bytes())
	}
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, Page{Title: http.StatusText(status), Kind: "error", Data: msg})
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	h.once.Do(func() { h.ov = h.d.overview(serverLinks{}) })
	p := Page{Title: "Overview", Kind: "overview", Data: h.ov}
	if h.d.Live() {
		p.Refresh = LiveRefresh
	}
	h.render(w, r, http.StatusOK, p)
}

// RolloutsPage is the rollouts page's data.
type RolloutsPage struct {
	Q                  Query
	Runs               []RunInfo
	Arms, Terms, Fails []string
	Groups             []string
	GroupBy            string
	Endpoints          []string // the endpoints of a pool; none: no endpoint column
	Rows               []TableRow
	Total, From, To    int
	Pages, Page        int
	Prev, Next         string
	First, Last        string
	Sorts              []Link // column headers
	Min, Max           string
}

func (h *Handler) rollouts(w http.ResponseWriter, r *http.Request) {
	q, err := ParseQuery(r.URL.Query(), len(h.d.Runs))
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "rollouts: "+err.Error())
		return
	}
	h.render(w, r, http.StatusOK, Page{Title: "Rollouts", Kind: "rollouts", Data: h.d.rolloutsPage(q, serverLinks{})})
}

func (d *Data) rolloutsPage(q Query, l linker) *RolloutsPage {
	sel := d.Select(q)
	p := &RolloutsPage{Q: q, Total: len(sel), GroupBy: d.groupField, Arms: d.arms, Endpoints: d.endpoints}
	for i, r := range d.Runs {
		p.Runs = append(p.Runs, RunInfo{Index: i, Dir: r.Dir})
	}
	e := d.Evaluation
	p.Terms, p.Fails = mapKeys(e.Overall.Terminations), mapKeys(e.Overall.FailuresByClass)
	for _, g := range e.ByGroup {
		p.Groups = append(p.Groups, g.Group)
	}
	p.Pages = max(1, (len(sel)+q.PageSize-1)/q.PageSize)
	p.Page = min(q.Page, p.Pages-1)
	p.From = p.Page * q.PageSize
	p.To = min(p.From+q.PageSize, len(sel))
	for _, i := range sel[p.From:p.To] {
		p.Rows = append(p.Rows, d.tableRow(int(i), l))
	}
	at := func(page int) string { c := q; c.Page = page; return l.rollouts(c) }
	if p.Page > 0 {
		p.Prev, p.First = at(p.Page-1), at(0)
	}
	if p.Page+1 < p.Pages {
		p.Next, p.Last = at(p.Page+1), at(p.Pages-1)
	}
	for _, k := range sortKeys {
		c := q
		c.Page, c.Sort, c.Desc = 0, k, q.Sort == k && !q.Desc
		label := strings.ReplaceAll(k, "_", " ")
		if q.Sort == k {
			label += map[bool]string{true: " ▼", false: " ▲"}[q.Desc]
		}
		p.Sorts = append(p.Sorts, Link{label, l.rollouts(c)})
	}
	if q.hasBounds {
		if q.Min == q.Min {
			p.Min = exact(q.Min)
		}
		if q.Max == q.Max {
			p.Max = exact(q.Max)
		}
	}
	return p
}

func mapKeys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// parseKey reads a rollout's key from URL values (with a prefix for the pair page).
func parseKey(v url.Values, prefix string, runs int) (Key, error) {
	var k Key
	run, err := strconv.Atoi(v.Get(prefix + "run"))
	if err != nil || run < 0 || run >= runs {
		return k, fmt.Errorf("%srun %q: want a run number from 0 to %d", prefix, v.Get(prefix+"run"), runs-1)
	}
	k.Run = run
	if k.Task, err = strconv.ParseInt(v.Get(prefix+"task"), 10, 64); err != nil {
		return k, fmt.Errorf("%stask %q: want a task index", prefix, v.Get(prefix+"task"))
	}
	if s := v.Get(prefix + "repeat"); s != "" {
		if k.Rollout, err = strconv.ParseInt(s, 10, 64); err != nil {
			return k, fmt.Errorf("%srepeat %q: want a repeat number", prefix, s)
		}
	}
	k.Arm = v.Get(prefix + "arm")
	return k, nil
}

func (h *Handler) trajectory(w http.ResponseWriter, r *http.Request) {
	k, err := parseKey(r.URL.Query(), "", len(h.d.Runs))
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "trajectory: "+err.Error())
		return
	}
	t, err := h.d.transcript(k, serverLinks{})
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "trajectory: "+err.Error())
		return
	}
	if !t.Found {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("run %d has no rollout of task %d, repeat %d, arm %q", k.Run, k.Task, k.Rollout, k.Arm))
		return
	}
	h.render(w, r, http.StatusOK, Page{Title: "Rollout " + t.TaskID, Kind: "trajectory", Data: t})
}

// PairPage shows two transcripts side by side.
type PairPage struct{ A, B *Transcript }

func (h *Handler) pair(w http.ResponseWriter, r *http.Request) {
	var ts [2]*Transcript
	for i, prefix := range []string{"a.", "b."} {
		k, err := parseKey(r.URL.Query(), prefix, len(h.d.Runs))
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, "pair: "+err.Error())
			return
		}
		if ts[i], err = h.d.transcript(k, serverLinks{}); err != nil {
			h.fail(w, r, http.StatusInternalServerError, "pair: "+err.Error())
			return
		}
		if !ts[i].Found {
			h.fail(w, r, http.StatusNotFound, fmt.Sprintf("run %d has no rollout of task %d, repeat %d, arm %q", k.Run, k.Task, k.Rollout, k.Arm))
			return
		}
	}
	h.render(w, r, http.StatusOK, Page{Title: "Side by side", Kind: "pair", Data: PairPage{ts[0], ts[1]}})
}

func (h *Handler) compare(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	var sides [2]Side
	if v.Get("a") == "" && v.Get("b") == "" {
		p := h.d.defaultPairs()
		if len(p) == 0 {
			h.fail(w, r, http.StatusNotFound, "compare: one run with one arm: nothing to compare (give two runs, or a run of several arms)")
			return
		}
		sides = p[0]
	} else {
		for i, name := range []string{"a", "b"} {
			s, err := parseSide(v.Get(name), len(h.d.Runs))
			if err != nil {
				h.fail(w, r, http.StatusBadRequest, "compare: "+name+" "+err.Error())
				return
			}
			sides[i] = s
		}
	}
	h.mu.Lock()
	c := h.compared[sides]
	h.mu.Unlock()
	if c == nil {
		c = h.d.comparison(sides[0], sides[1], serverLinks{})
		h.mu.Lock()
		if h.compared == nil || len(h.compared) >= maxCompared {
			h.compared = map[[2]Side]*Comparison{}
		}
		h.compared[sides] = c
		h.mu.Unlock()
	}
	h.render(w, r, http.StatusOK, Page{Title: "Compare", Kind: "compare", Data: c})
}
