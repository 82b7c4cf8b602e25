package view

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// The crawl: from /, every same-origin link of every page is followed (breadth first, bounded),
// and each must answer 200 with what it promises: a link to the rollouts table shows exactly
// the Parquet file's rows for its filter (the total, and every row on the page one of them), a
// transcript link the rollout it names. The browser tests open pages directly; this one goes
// where the pages send a reader.
func TestCrawlEveryLink(t *testing.T) {
	dir := fixtureRun(t)
	d, err := Load([]string{dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHandler(d)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	recs, err := record.ReadParquet(filepath.Join(dir, rundir.ParquetFile))
	if err != nil {
		t.Fatal(err)
	}
	base, _ := url.Parse(srv.URL)

	const maxPages = 600
	seen := map[string]bool{"/": true}
	queue := []string{"/"}
	from := map[string]string{"/": "(start)"}
	rolloutLinks, transcriptLinks := 0, 0
	for len(queue) > 0 && len(seen) <= maxPages {
		path := queue[0]
		queue = queue[1:]
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			msg := string(body)
			if doc, err := html.Parse(strings.NewReader(msg)); err == nil {
				if m := find(doc, func(n *html.Node) bool { return n.Data == "main" }); m != nil {
					msg = text(m)
				}
			}
			t.Errorf("GET %s (linked from %s): %d %s", path, from[path], resp.StatusCode, msg)
			continue
		}
		doc, err := html.Parse(strings.NewReader(string(body)))
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		u, _ := url.Parse(path)
		switch u.Path {
		case "/rollouts":
			rolloutLinks++
			checkRolloutsPage(t, path, doc, recs)
		case "/trajectory":
			transcriptLinks++
			q := u.Query()
			if a := find(doc, func(n *html.Node) bool { return n.Data == "article" && attr(n, "class") == "transcript" }); a == nil ||
				!strings.Contains(text(a), "arm "+q.Get("arm")) || !strings.Contains(text(a), "repeat "+q.Get("repeat")) {
				t.Errorf("GET %s: no transcript of that rollout", path)
			}
		}
		for _, href := range links(doc) {
			ref, err := url.Parse(href)
			if err != nil {
				t.Errorf("%s: link %q: %v", path, href, err)
				continue
			}
			abs := base.ResolveReference(ref)
			if abs.Host != base.Host || abs.Scheme != base.Scheme {
				continue
			}
			next := abs.RequestURI()
			if abs.Fragment != "" && abs.Path == u.Path && abs.RawQuery == u.RawQuery {
				continue // an anchor on this page
			}
			if !seen[next] {
				seen[next] = true
				from[next] = path
				queue = append(queue, next)
			}
		}
	}
	t.Logf("crawled %d pages: %d of the rollouts table, %d transcripts", len(seen), rolloutLinks, transcriptLinks)
	if rolloutLinks < 3 || transcriptLinks < 3 {
		t.Errorf("the crawl reached %d rollouts pages and %d transcripts of %d pages; want the links followed", rolloutLinks, transcriptLinks, len(seen))
	}
}

// checkRolloutsPage checks a page of the rollouts table against the Parquet file's records.
func checkRolloutsPage(t *testing.T, path string, doc *html.Node, recs []record.Record) {
	t.Helper()
	u, _ := url.Parse(path)
	v := u.Query()
	match := func(r record.Record) bool {
		if s := v.Get("arm"); s != "" && r.Arm != s {
			return false
		}
		if s := v.Get("termination"); s != "" && r.Termination != s {
			return false
		}
		if s := v.Get("failure"); s == "-" && r.FailureClass != "" || s != "" && s != "-" && string(r.FailureClass) != s {
			return false
		}
		if s := v.Get("endpoint"); s != "" && r.Endpoint != s {
			return false
		}
		if s := v.Get("q"); s != "" && !strings.Contains(r.TaskID, s) {
			return false
		}
		if s := v.Get("group"); s != "" {
			g, ok := r.TaskFields["category"]
			if !ok {
				g = "(none)" // the group of the rollouts whose task has no such field
			}
			if g != s {
				return false
			}
		}
		lo, hi := math.Inf(-1), math.Inf(1)
		if s := v.Get("min"); s != "" {
			lo, _ = strconv.ParseFloat(s, 64)
		}
		if s := v.Get("max"); s != "" {
			hi, _ = strconv.ParseFloat(s, 64)
		}
		if v.Has("min") || v.Has("max") {
			return r.HasReward && r.FailureClass == "" && r.Reward >= lo && r.Reward <= hi
		}
		return true
	}
	want := map[string]bool{}
	for _, r := range recs {
		if match(r) {
			want[fmt.Sprintf("%d/%d/%s", r.TaskIndex, r.RolloutIndex, r.Arm)] = true
		}
	}
	total := find(doc, func(n *html.Node) bool { return n.Data == "b" && attr(n, "id") == "total" })
	if total == nil || text(total) != strconv.Itoa(len(want)) {
		got := "none"
		if total != nil {
			got = text(total)
		}
		t.Errorf("GET %s: %s rollouts, the Parquet file has %d for that filter", path, got, len(want))
	}
	rows := 0
	each(doc, func(n *html.Node) {
		if n.Data != "tr" || attr(n, "data-task") == "" {
			return
		}
		rows++
		if k := attr(n, "data-task") + "/" + attr(n, "data-repeat") + "/" + attr(n, "data-arm"); !want[k] {
			t.Errorf("GET %s: row %s is not one of the filter's", path, k)
		}
	})
	size := DefaultPageSize
	if s := v.Get("size"); s != "" {
		size, _ = strconv.Atoi(s)
	}
	page, _ := strconv.Atoi(v.Get("page"))
	if wantRows := max(0, min(size, len(want)-page*size)); rows != wantRows {
		t.Errorf("GET %s: %d rows shown, want %d", path, rows, wantRows)
	}
}

func each(n *html.Node, f func(*html.Node)) {
	if n.Type == html.ElementNode {
		f(n)
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		each(c, f)
	}
}

func find(n *html.Node, ok func(*html.Node) bool) (found *html.Node) {
	each(n, func(c *html.Node) {
		if found == nil && ok(c) {
			found = c
		}
	})
	return found
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.TrimSpace(b.String())
}

// links are the href of every <a> of a page.
func links(doc *html.Node) []string {
	var out []string
	each(doc, func(n *html.Node) {
		if n.Data == "a" {
			if h := attr(n, "href"); h != "" {
				out = append(out, h)
			}
		}
	})
	return out
}

// A transcript line longer than the readers' bound (rundir.MaxTrajectoryLine) is not read
// into memory: its page answers 200 and says why there is no transcript.
func TestTranscriptOverTheBound(t *testing.T) {
	dir := fixtureRun(t)
	d, err := Load([]string{dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHandler(d)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	saved := rundir.MaxTrajectoryLine
	rundir.MaxTrajectoryLine = 100
	t.Cleanup(func() { rundir.MaxTrajectoryLine = saved })
	resp, err := http.Get(srv.URL + "/trajectory?run=0&task=0&repeat=0&arm=multi")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "longer than 100 bytes") {
		t.Errorf("%d: %.300s", resp.StatusCode, body)
	}
}

// A transcript whose line is far longer than the bound a reader may hold (a 1 MB message, the
// bound set to 64 KiB) is read as it streams: the page answers 200 with the message cut at
// MaxShownString and a note of its size, and the rest of the transcript; the report's page too.
func TestTranscriptOfALineLongerThanTheBound(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(fixtureRun(t))); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, rundir.TrajectoriesFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	long := strings.Repeat("abc ", 250_000) + "TAIL"
	changed := false
	for i, line := range lines {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		if l["task_index"] != 0.0 || l["rollout_index"] != 0.0 || l["arm"] != "multi" {
			continue
		}
		msgs := l["trajectory"].(map[string]any)["messages"].([]any)
		msgs[0].(map[string]any)["content"] = long
		nb, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		lines[i], changed = string(nb), true
	}
	if !changed {
		t.Fatal("no line of task 0 repeat 0 arm multi")
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, rundir.TrajIndexFile))
	savedLine, savedString := rundir.MaxTrajectoryLine, rundir.MaxShownString
	rundir.MaxTrajectoryLine, rundir.MaxShownString = 64<<10, 1000
	t.Cleanup(func() { rundir.MaxTrajectoryLine, rundir.MaxShownString = savedLine, savedString })

	d, err := Load([]string{dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHandler(d)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/trajectory?run=0&task=0&repeat=0&arm=multi")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(body)
	if resp.StatusCode != 200 || !strings.Contains(page, "cut here: 1000004 bytes in trajectories.jsonl") || strings.Contains(page, "TAIL") ||
		strings.Contains(page, "longer than") || !strings.Contains(page, "abc abc") || strings.Count(page, "abc ") > 2*250 {
		t.Errorf("%d: %.600s", resp.StatusCode, page)
	}
	tr, err := d.transcript(Key{Task: 0, Rollout: 0, Arm: "multi"}, serverLinks{})
	if err != nil || len(tr.Messages) < 2 || tr.Messages[0].Content != strings.Repeat("abc ", 250)+rundir.ClipNote(1000004) {
		t.Errorf("transcript: %v %+v", err, tr)
	}
}
