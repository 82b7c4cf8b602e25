package view

import (
	"bytes"
	"cmp"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

func get(t *testing.T, method, u string, header map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestServerSafety(t *testing.T) {
	dir := fixtureRun(t)
	base, _ := serve(t, dir)
	for _, tt := range []struct {
		method, path string
		header       map[string]string
		status       int
		says         string
	}{
		{"GET", "/", nil, 200, "Overview"},
		{"HEAD", "/", nil, 200, ""},
		{"POST", "/", nil, 405, "GET and HEAD only"},
		{"PUT", "/rollouts", nil, 405, "GET and HEAD only"},
		{"DELETE", "/trajectory?run=0&task=0&arm=multi", nil, 405, "GET and HEAD only"},
		{"GET", "/../../etc/passwd", nil, 404, ""},
		{"GET", "/%2e%2e/%2e%2e/etc/passwd", nil, 404, ""},
		{"GET", "/" + rundir.TrajectoriesFile, nil, 404, ""},
		{"GET", "/trajectory?run=../../etc&task=0&arm=multi", nil, 400, "run &#34;../../etc&#34;: want a run number from 0 to 0"},
		{"GET", "/trajectory?run=1&task=0&arm=multi", nil, 400, "want a run number from 0 to 0"},
		{"GET", "/trajectory?run=0&task=x", nil, 400, "task &#34;x&#34;: want a task index"},
		{"GET", "/trajectory?run=0&task=99999&arm=multi", nil, 404, "run 0 has no rollout of task 99999"},
		{"GET", "/rollouts?sort=evil", nil, 400, "sort &#34;evil&#34;: want one of task, repeat"},
		{"GET", "/rollouts?min=abc", nil, 400, "min &#34;abc&#34;: want a number"},
		{"GET", "/rollouts?page=-1", nil, 400, "page &#34;-1&#34;"},
		{"GET", "/compare?a=0:multi&b=7", nil, 400, "compare: b &#34;7&#34;"},
		{"GET", "/pair?a.run=0&a.task=0&a.arm=multi&b.run=0&b.task=99999&b.arm=multi", nil, 404, "no rollout of task 99999"},
	} {
		status, h, body := get(t, tt.method, base+tt.path, tt.header)
		if status != tt.status || !strings.Contains(body, tt.says) {
			t.Errorf("%s %s: %d %.200q, want %d saying %q", tt.method, tt.path, status, body, tt.status, tt.says)
		}
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
			t.Errorf("%s %s: Content-Security-Policy %q", tt.method, tt.path, csp)
		}
	}
	// With Hosts set (a loopback listener), another name is refused: a page of another site
	// cannot reach the server through DNS rebinding.
	d, _ := Load([]string{dir}, Options{})
	h, _ := NewHandler(d)
	u, _ := url.Parse(base)
	h.Hosts = LoopbackHosts(u.Host)
	rec := &recorder{header: http.Header{}}
	h.ServeHTTP(rec, mustRequest(t, "GET", "http://evil.example:"+u.Port()+"/"))
	if rec.status != http.StatusMisdirectedRequest {
		t.Errorf("Host evil.example: %d, want 421", rec.status)
	}
	rec = &recorder{header: http.Header{}}
	h.ServeHTTP(rec, mustRequest(t, "GET", "http://localhost:"+u.Port()+"/"))
	if rec.status != http.StatusOK {
		t.Errorf("Host localhost: %d, want 200", rec.status)
	}
}

type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(s int) { r.status = s }

func mustRequest(t *testing.T, method, u string) *http.Request {
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// Hostile text in a transcript reaches the page escaped, also in the task id and the arguments.
func TestHostileEscaped(t *testing.T) {
	base, _ := serve(t, fixtureRun(t))
	_, _, body := get(t, "GET", fmt.Sprintf("%s/trajectory?run=0&task=%d&repeat=0&arm=multi", base, hostileTask), nil)
	for _, raw := range []string{"<script>", "</textarea>", "<img", `href="javascript:`, "<b>bold", "</pre></textarea>"} {
		if strings.Contains(body, raw) {
			t.Errorf("the page holds %q unescaped", raw)
		}
	}
	for _, escaped := range []string{"&lt;/pre&gt;&lt;/textarea&gt;&lt;script&gt;window.__pwned = 1&lt;/script&gt;", "hostile-&lt;script&gt;x&lt;/script&gt;"} {
		if !strings.Contains(body, escaped) {
			t.Errorf("the page lacks %q", escaped)
		}
	}
	if scripts := regexp.MustCompile(`(?i)<script`).FindAllString(body, -1); len(scripts) != 0 {
		t.Errorf("%d <script> tags in the page", len(scripts))
	}
}

// TestEndpointAndTokens checks the endpoint of a pool (the record's, and each round's) and the
// counts of a round's captured tokens, with the note of what is missing, all escaped; the
// token arrays themselves are not on the page.
func TestEndpointAndTokens(t *testing.T) {
	base, _ := serve(t, fixtureRun(t))
	// html/template's text escaping: HTMLEscapeString's, and + as &#43;.
	esc := func(s string) string { return strings.ReplaceAll(template.HTMLEscapeString(s), "+", "&#43;") }
	_, _, traj := get(t, "GET", fmt.Sprintf("%s/trajectory?run=0&task=%d&repeat=0&arm=multi", base, hostileTask), nil)
	_, _, plain := get(t, "GET", base+"/trajectory?run=0&task=0&repeat=0&arm=multi", nil)
	_, _, table := get(t, "GET", base+"/rollouts?endpoint="+url.QueryEscape(hostileEndpoint), nil)
	_, _, all := get(t, "GET", base+"/rollouts?size=1000", nil)
	for _, tc := range []struct {
		name, body string
		want, not  []string
	}{
		{"hostile trajectory", traj, []string{
			`endpoint <span id="endpoint">` + esc(hostileEndpoint) + `</span>`,
			esc("round 1 · model 12.5 ms · 30 prompt + 7 completion tokens · finish tool_calls · endpoint " + hostileEndpoint),
			esc("round 2 · model 8.0 ms · 50 prompt + 5 completion tokens · finish stop · endpoint pool-a"),
			`<div class="tokens">token ids: 3 prompt, 2 generation · 2 log-probs</div>`,
			`<div class="tokens">token ids: missing prompt, missing generation · 1 log-probs</div>`,
			`<div class="tokens note">` + esc(hostileNote) + `</div>`,
		}, []string{"<script", "-0.1", "[1,2,3]", "prompt_token_ids"}},
		{"trajectory without a pool or tokens", plain, nil, []string{`id="endpoint"`, `class="tokens`, "· endpoint "}},
		{"rollouts of the hostile endpoint", table, []string{
			`<b id="total">1</b> rollouts`, `<th>endpoint</th>`, `<td class="endpoint">` + esc(hostileEndpoint) + `</td>`,
			`<option selected>` + esc(hostileEndpoint) + `</option>`, "<option>pool-a</option>",
		}, []string{"<script"}},
		{"every rollout: the endpoint column", all, []string{`<td class="endpoint">pool-a</td>`, `<td class="endpoint"></td>`}, nil},
	} {
		for _, w := range tc.want {
			if !strings.Contains(tc.body, w) {
				t.Errorf("%s: the page lacks %q", tc.name, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(tc.body, n) {
				t.Errorf("%s: the page holds %q", tc.name, n)
			}
		}
	}
}

// The rollouts table against the Parquet file, read by record.ReadParquet and filtered and
// sorted here: every filter, a sort each way, and paging.
func TestRolloutsQuery(t *testing.T) {
	dir := fixtureRun(t)
	d, err := Load([]string{dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := record.ReadParquet(filepath.Join(dir, rundir.ParquetFile))
	if err != nil {
		t.Fatal(err)
	}
	key := func(r record.Record) string { return fmt.Sprintf("%d/%d/%s", r.TaskIndex, r.RolloutIndex, r.Arm) }
	byKey := func(a, b record.Record) int {
		return cmp.Or(cmp.Compare(a.TaskIndex, b.TaskIndex), cmp.Compare(a.RolloutIndex, b.RolloutIndex), strings.Compare(a.Arm, b.Arm))
	}
	scored := func(r record.Record) bool { return r.HasReward && r.FailureClass == "" }
	for _, tt := range []struct {
		query string
		keep  func(r record.Record) bool
		order func(a, b record.Record) int
	}{
		{"", func(record.Record) bool { return true }, nil},
		{"arm=single", func(r record.Record) bool { return r.Arm == "single" }, nil},
		{"failure=rate_limited", func(r record.Record) bool { return r.FailureClass == record.FailRateLimited }, nil},
		{"failure=-", func(r record.Record) bool { return r.FailureClass == "" }, nil},
		{"termination=completed", func(r record.Record) bool { return r.Termination == "completed" }, nil},
		{"min=0.5", func(r record.Record) bool { return scored(r) && r.Reward >= 0.5 }, nil},
		{"min=0&max=0", func(r record.Record) bool { return scored(r) && r.Reward == 0 }, nil},
		{"q=count-0", func(r record.Record) bool { return strings.Contains(r.TaskID, "count-0") }, nil},
		{"group=easy", func(r record.Record) bool { return r.TaskFields["category"] == "easy" }, nil},
		{"endpoint=pool-a", func(r record.Record) bool { return r.Endpoint == "pool-a" }, nil},
		{"endpoint=" + url.QueryEscape(hostileEndpoint), func(r record.Record) bool { return r.Endpoint == hostileEndpoint }, nil},
		{"q=nothing-has-this", func(record.Record) bool { return false }, nil},
		{"sort=latency&desc=1", func(record.Record) bool { return true }, func(a, b record.Record) int { return cmp.Compare(b.LatencyMs, a.LatencyMs) }},
		{"sort=tokens", func(record.Record) bool { return true }, func(a, b record.Record) int {
			return cmp.Compare(a.PromptTokens+a.CompletionTokens, b.PromptTokens+b.CompletionTokens)
		}},
		{"sort=reward&arm=multi", func(r record.Record) bool { return r.Arm == "multi" }, func(a, b record.Record) int {
			if scored(a) != scored(b) {
				return map[bool]int{true: 1, false: -1}[scored(a)]
			}
			if !scored(a) {
				return 0
			}
			return cmp.Compare(a.Reward, b.Reward)
		}},
	} {
		v, _ := url.ParseQuery(tt.query)
		q, err := ParseQuery(v, 1)
		if err != nil {
			t.Fatalf("%s: %v", tt.query, err)
		}
		var want []string
		kept := slices.DeleteFunc(slices.Clone(recs), func(r record.Record) bool { return !tt.keep(r) })
		slices.SortStableFunc(kept, func(a, b record.Record) int {
			if tt.order != nil {
				if c := tt.order(a, b); c != 0 {
					return c
				}
			}
			return byKey(a, b)
		})
		for _, r := range kept {
			want = append(want, key(r))
		}
		var got []string
		for _, i := range d.Select(q) {
			got = append(got, key(d.record(int(i))))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q: got %v, want %v", tt.query, got, want)
		}
	}
	// Paging: the pages, in order, are the whole selection.
	v, _ := url.ParseQuery("size=7&sort=rounds")
	q, _ := ParseQuery(v, 1)
	all := d.Select(q)
	var paged []int32
	for page := 0; ; page++ {
		q.Page = page
		p := d.rolloutsPage(q, serverLinks{})
		for _, r := range p.Rows {
			paged = append(paged, int32(d.find(r.Key)))
		}
		if p.Next == "" {
			if p.Pages != (len(all)+6)/7 {
				t.Errorf("%d pages for %d rows of 7", p.Pages, len(all))
			}
			break
		}
	}
	if !slices.Equal(paged, all) {
		t.Errorf("the pages hold %d rows, not the selection's %d in order", len(paged), len(all))
	}
	if _, err := ParseQuery(url.Values{"max": {"NaN"}}, 1); err == nil {
		t.Error("max=NaN accepted")
	}
	if q, _ := ParseQuery(url.Values{"size": {"99999"}}, 1); q.PageSize != 1000 {
		t.Errorf("size 99999 gave a page of %d", q.PageSize)
	}
}

// The one-file report holds no link, script, font or image from elsewhere.
func TestReportSelfContained(t *testing.T) {
	dir := fixtureRun(t)
	d, err := Load([]string{dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteHTML(&b, d, ReportOptions{PerArm: 1, MaxFailed: 3}); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, m := range regexp.MustCompile(`(?i)(?:src|href|action)\s*=\s*"([^"]*)"`).FindAllStringSubmatch(html, -1) {
		if v := m[1]; !strings.HasPrefix(v, "#") && v != "data:," {
			t.Errorf("a reference out of the file: %s", m[0])
		}
	}
	for _, bad := range []string{"<script", "@import", "url(", "<link rel=\"stylesheet\""} {
		if strings.Contains(strings.ToLower(html), bad) {
			t.Errorf("the report holds %q", bad)
		}
	}
	// The sample: 3 failed rollouts (of 5) and one of each arm.
	if n := strings.Count(html, `<article class="transcript"`); n != 3+2 {
		t.Errorf("%d transcripts, want 3 failed + 1 per arm", n)
	}
}

// Several runs are read in turn; a run without rollouts.parquet (not finished) is read from
// its journal; two runs of the same tasks compare task by task.
func TestSeveralRuns(t *testing.T) {
	dir := fixtureRun(t)
	live := t.TempDir()
	for _, name := range []string{rundir.JournalFile, rundir.TrajectoriesFile, rundir.ManifestFile} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(live, name), b, 0o644)
	}
	d, err := Load([]string{dir, live}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	one, _ := Load([]string{dir}, Options{})
	if d.Rollouts() != 2*one.Rollouts() || d.EvalSource != "computed from the records" {
		t.Fatalf("%d rollouts (%s), want twice %d, computed", d.Rollouts(), d.EvalSource, one.Rollouts())
	}
	if d.Evaluation.Duplicates != 0 && d.Evaluation.Overall.Rollouts != d.Rollouts() {
		t.Errorf("evaluation over %d rollouts", d.Evaluation.Overall.Rollouts)
	}
	c := d.comparison(Side{0, "multi"}, Side{1, "multi"}, serverLinks{})
	if c.C.MeanDiff != 0 || c.C.Won+c.C.Lost != 0 || c.C.Tied != c.C.Tasks || len(c.Flipped) != 0 || c.Scatter.Shown != c.C.Tasks {
		t.Errorf("a run against its copy: diff %v, won %d lost %d tied %d of %d, %d flipped", c.C.MeanDiff, c.C.Won, c.C.Lost, c.C.Tied, c.C.Tasks, len(c.Flipped))
	}
	// The second run's transcripts are its own (its index was built on first use).
	tr, err := d.transcript(Key{Run: 1, Task: hostileTask, Rollout: 0, Arm: "multi"}, serverLinks{})
	if err != nil || !tr.Found || len(tr.Messages) != 5 {
		t.Fatalf("run 1's hostile transcript: %v %+v", err, tr)
	}
	if _, err := os.Stat(filepath.Join(live, rundir.TrajIndexFile)); err != nil {
		t.Errorf("no index written for the live run: %v", err)
	}
	q, _ := ParseQuery(url.Values{"run": {"1"}, "failure": {"rate_limited"}}, 2)
	if n := len(d.Select(q)); n != 3 {
		t.Errorf("run 1, rate_limited: %d rows, want 3", n)
	}
}
