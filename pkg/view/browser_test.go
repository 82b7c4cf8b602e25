package view

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

var (
	screenshots = flag.String("screenshots", "", "write screenshots of each page to this directory (docs/img), from the runs of -screenshot-runs")
	shotRuns    = flag.String("screenshot-runs", "", "comma-separated run directories the screenshots show (default: the test's fixture run)")
)

// chromium finds a Chromium or Chrome binary: $ROLLOUT_CHROMIUM, else Debian's and others' names.
func chromium() string {
	if p := os.Getenv("ROLLOUT_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser starts a headless Chromium for the test (a fresh profile, no network beyond
// loopback pages) and returns a tab's context and the console messages seen so far. Without
// a Chromium the test is skipped, saying so, except under CI=true, where it fails.
func browser(t *testing.T) (ctx context.Context, console func() []chromedp.ConsoleMessage) {
	t.Helper()
	bin := chromium()
	if bin == "" {
		msg := "no Chromium found (apt-get install -y chromium, or set ROLLOUT_CHROMIUM): the browser tests did not run"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	var mu sync.Mutex
	var msgs []chromedp.ConsoleMessage
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", bin, err)
	}
	lctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	messages := chromedp.Console(lctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			mu.Lock()
			msgs = append(msgs, m)
			mu.Unlock()
		}
	}()
	return ctx, func() []chromedp.ConsoleMessage {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(msgs)
	}
}

// run runs a browser action with a deadline.
func run[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// waitFor waits until the expression is true on the tab's page (a page being replaced by a
// navigation answers nothing: it is asked again).
func waitFor(t *testing.T, ctx context.Context, expr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		ok, err := chromedp.Run(c, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", expr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// noConsoleErrors fails when a page logged an error or a warning, or threw, since the
// console had from messages.
func noConsoleErrors(t *testing.T, page string, console func() []chromedp.ConsoleMessage, from int) {
	t.Helper()
	time.Sleep(100 * time.Millisecond) // let the last page's messages arrive (not a timing assertion)
	for _, m := range console()[from:] {
		if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
			t.Errorf("%s: console %s (%s)", page, m, m.URL)
		}
	}
}

// serve serves the run directories' pages on a loopback port.
func serve(t *testing.T, dirs ...string) (string, *Data) {
	t.Helper()
	d, err := Load(dirs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHandler(d)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, d
}

// readEvaluation reads evaluation.json as written by rundir.Finish.
func readEvaluation(t *testing.T, dir string) report.Evaluation {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, rundir.EvaluationFile))
	if err != nil {
		t.Fatal(err)
	}
	var e report.Evaluation
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestBrowser(t *testing.T) {
	dir := fixtureRun(t)
	base, _ := serve(t, dir)
	ctx, console := browser(t)
	ev := readEvaluation(t, dir)

	t.Run("overview: one whisker per arm, numbers of evaluation.json", func(t *testing.T) {
		from := len(console())
		run(t, ctx, "open the overview", chromedp.Navigate(base+"/"))
		type whisker struct {
			Scope, Mean, Low, High, Title string
		}
		got := run(t, ctx, "read the whiskers", chromedp.Evaluate[[]whisker](`[...document.querySelectorAll('#ci-arms g.ci-row')].map(g => ({
			Scope: g.dataset.scope, Mean: g.dataset.mean, Low: g.dataset.low, High: g.dataset.high,
			Title: g.querySelector('title').textContent}))`))
		if len(got) != len(ev.ByArm) || len(got) < 2 {
			t.Fatalf("%d whiskers, want one per arm: %d (%+v)", len(got), len(ev.ByArm), got)
		}
		for i, s := range ev.ByArm {
			w := got[i]
			if w.Scope != s.Scope || s.CI95 == nil {
				t.Fatalf("whisker %d is %q, want %q with a CI", i, w.Scope, s.Scope)
			}
			for _, c := range []struct {
				name, text string
				want       float64
			}{{"mean", w.Mean, s.MeanReward}, {"low", w.Low, s.CI95.Low}, {"high", w.High, s.CI95.High}} {
				var v float64
				if _, err := fmt.Sscan(c.text, &v); err != nil || v != c.want {
					t.Errorf("%s: %s %q, evaluation.json has %v", s.Scope, c.name, c.text, c.want)
				}
			}
			if want := fmt.Sprintf("mean %s, 95%% CI %s to %s", num(s.MeanReward), num(s.CI95.Low), num(s.CI95.High)); !strings.Contains(w.Title, want) {
				t.Errorf("%s: tooltip %q, want it to say %q", s.Scope, w.Title, want)
			}
		}
		// The whiskers are drawn: each has its line from low to high around the mean's dot.
		drawn := run(t, ctx, "measure the whiskers", chromedp.Evaluate[[]float64](`[...document.querySelectorAll('#ci-arms g.ci-row')].map(g => {
			const l = g.querySelector('line.whisker').getBBox(), c = g.querySelector('circle.mean').getBBox();
			return (l.x <= c.x + c.width/2 && c.x + c.width/2 <= l.x + l.width && l.width > 0) ? 1 : 0 })`))
		for i, ok := range drawn {
			if ok != 1 && !ev.ByArm[i].CI95.Point {
				t.Errorf("%s: the mean's dot is not on its whisker", ev.ByArm[i].Scope)
			}
		}
		// Per group too (the fixture's evaluation is grouped by category).
		groups := run(t, ctx, "count the group whiskers", chromedp.Evaluate[int](`document.querySelectorAll('#ci-groups g.ci-row').length`))
		if groups != len(ev.ByGroup) || groups == 0 {
			t.Errorf("%d group whiskers, want %d", groups, len(ev.ByGroup))
		}
		// The pass@k chart has a point per (arm, k) of evaluation.json, with its value.
		pass := run(t, ctx, "read pass@k", chromedp.Evaluate[[][]string](`[...document.querySelectorAll('#pass-at-k g.series')].map(g => [...g.querySelectorAll('circle')].map(c => c.dataset.value))`))
		for i, s := range ev.ByArm {
			if len(pass) <= i || len(pass[i]) != len(s.PassAtK) {
				t.Fatalf("pass@k points %v, evaluation.json has %+v", pass, s.PassAtK)
			}
			for j, p := range s.PassAtK {
				if pass[i][j] != exact(p.PassAt) {
					t.Errorf("%s pass@%d: %s, want %v", s.Scope, p.K, pass[i][j], p.PassAt)
				}
			}
		}
		noConsoleErrors(t, "overview", console, from)
	})

	t.Run("rollouts: filtered to a failure class", func(t *testing.T) {
		from := len(console())
		recs, err := record.ReadParquet(filepath.Join(dir, rundir.ParquetFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, class := range []string{record.FailRateLimited, record.FailModelUnavailable} {
			var want []string
			for _, r := range recs {
				if string(r.FailureClass) == class {
					want = append(want, fmt.Sprintf("%d/%d/%s", r.TaskIndex, r.RolloutIndex, r.Arm))
				}
			}
			slices.Sort(want)
			run(t, ctx, "open the rollouts", chromedp.Navigate(base+"/rollouts"))
			all := run(t, ctx, "read the total", chromedp.Evaluate[string](`document.getElementById('total').textContent`))
			if all != fmt.Sprint(len(recs)) {
				t.Errorf("unfiltered: %s rollouts, the Parquet file has %d", all, len(recs))
			}
			// Choose the class in the form and submit it, as a person would.
			run(t, ctx, "choose "+class, chromedp.SetValue(chromedp.CSS(`select[name=failure]`), class))
			run(t, ctx, "submit", chromedp.Click(chromedp.CSS(`form.filters button[type=submit]`)))
			waitFor(t, ctx, `location.search.includes('failure=`+class+`') && document.readyState === 'complete' && !!document.getElementById('total')`)
			got := run(t, ctx, "read the rows", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#rollouts tbody tr')].map(r => r.dataset.task + '/' + r.dataset.repeat + '/' + r.dataset.arm)`))
			classes := run(t, ctx, "read the classes", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#rollouts tbody tr')].map(r => r.dataset.failure)`))
			slices.Sort(got)
			if len(want) == 0 || !slices.Equal(got, want) {
				t.Errorf("%s: rows %v, want %v", class, got, want)
			}
			for _, c := range classes {
				if c != class {
					t.Errorf("%s: a row of class %q", class, c)
				}
			}
		}
		noConsoleErrors(t, "rollouts", console, from)
	})

	t.Run("trajectory: every message in order", func(t *testing.T) {
		from := len(console())
		// The transcripts as trajectories.jsonl has them, read here with encoding/json.
		f, err := os.Open(filepath.Join(dir, rundir.TrajectoriesFile))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<26)
		checked := 0
		for sc.Scan() && checked < 6 {
			var l struct {
				Task, Rollout int64
				Arm           string
				Trajectory    *struct {
					Messages []struct {
						Role    string `json:"role"`
						Content string `json:"content"`
					} `json:"messages"`
				} `json:"trajectory"`
			}
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatal(err)
			}
			var k struct {
				Task    int64  `json:"task_index"`
				Rollout int64  `json:"rollout_index"`
				Arm     string `json:"arm"`
			}
			json.Unmarshal(sc.Bytes(), &k)
			if l.Trajectory == nil || len(l.Trajectory.Messages) < 4 || k.Task >= hostileTask {
				continue
			}
			checked++
			u := fmt.Sprintf("%s/trajectory?run=0&task=%d&repeat=%d&arm=%s", base, k.Task, k.Rollout, k.Arm)
			run(t, ctx, "open "+u, chromedp.Navigate(u))
			type shown struct{ Role, Content string }
			got := run(t, ctx, "read the messages", chromedp.Evaluate[[]shown](`[...document.querySelectorAll('.messages .msg')].map(m => ({
				Role: m.dataset.role, Content: (m.querySelector('pre.content') || {textContent: ''}).textContent}))`))
			if len(got) != len(l.Trajectory.Messages) {
				t.Fatalf("%s: %d messages shown, the trajectory has %d", u, len(got), len(l.Trajectory.Messages))
			}
			for i, m := range l.Trajectory.Messages {
				if got[i].Role != m.Role || got[i].Content != m.Content {
					t.Errorf("%s: message %d shown as %q %.60q, want %q %.60q", u, i, got[i].Role, got[i].Content, m.Role, m.Content)
				}
			}
			reward := run(t, ctx, "read the outcome", chromedp.Evaluate[string](`document.getElementById('outcome').textContent`))
			if !strings.Contains(reward, "reward") {
				t.Errorf("%s: outcome %q", u, reward)
			}
		}
		if checked == 0 {
			t.Fatal("no trajectory with messages in the fixture")
		}
		noConsoleErrors(t, "trajectory", console, from)
	})

	t.Run("hostile text is shown, never run", func(t *testing.T) {
		from := len(console())
		u := fmt.Sprintf("%s/trajectory?run=0&task=%d&repeat=0&arm=multi", base, hostileTask)
		run(t, ctx, "open the hostile rollout", chromedp.Navigate(u))
		pwned := run(t, ctx, "read __pwned", chromedp.Evaluate[string](`String(window.__pwned)`))
		if pwned != "undefined" {
			t.Errorf("injected script ran: window.__pwned = %s", pwned)
		}
		tool := run(t, ctx, "read the tool result", chromedp.Evaluate[string](`document.querySelector('.msg[data-role=tool] pre.content').textContent`))
		if tool != hostile {
			t.Errorf("tool result shown as %q, want the text %q", tool, hostile)
		}
		n := run(t, ctx, "count injected elements", chromedp.Evaluate[int](`document.querySelectorAll('.messages pre *, .messages a, h1 *:not(span), script, img, textarea').length + document.scripts.length`))
		if n != 0 {
			t.Errorf("%d elements were made from the transcript's markup", n)
		}
		// Following the link a script would have made runs nothing either: there is none.
		args := run(t, ctx, "read the arguments", chromedp.Evaluate[string](`document.querySelector('pre.arguments').textContent`))
		if !strings.Contains(args, "<script>window.__pwned=5</script>") {
			t.Errorf("arguments shown as %q", args)
		}
		noConsoleErrors(t, "hostile trajectory", console, from)
	})

	t.Run("compare: the arms' paired difference and changed tasks", func(t *testing.T) {
		from := len(console())
		run(t, ctx, "open compare", chromedp.Navigate(base+"/compare?a=0:multi&b=0:single"))
		recs, _ := record.ReadParquet(filepath.Join(dir, rundir.ParquetFile))
		var a, b []record.Record
		for _, r := range recs {
			if r.Arm == "multi" {
				a = append(a, r)
			} else {
				b = append(b, r)
			}
		}
		c := report.Compare(a, b, "multi", "single", ev.Options)
		diff := run(t, ctx, "read the difference", chromedp.Evaluate[string](`document.getElementById('diff').textContent`))
		if !strings.Contains(diff, fmt.Sprintf("%d won", c.Won)) || !strings.Contains(diff, fmt.Sprintf("%d lost", c.Lost)) || !strings.Contains(diff, num(c.MeanDiff)) {
			t.Errorf("compare shows %q; want %d won, %d lost, difference %s", diff, c.Won, c.Lost, num(c.MeanDiff))
		}
		rows := run(t, ctx, "count changed tasks", chromedp.Evaluate[int](`document.querySelectorAll('#flipped tr').length - 1`))
		if rows != c.Won+c.Lost && !(rows == -1 && c.Won+c.Lost == 0) {
			t.Errorf("%d changed tasks listed, want won + lost = %d", rows, c.Won+c.Lost)
		}
		dots := run(t, ctx, "count dots", chromedp.Evaluate[int](`[...document.querySelectorAll('#scatter circle')].reduce((n, c) => n + Number(c.dataset.count), 0)`))
		if dots != c.Tasks {
			t.Errorf("the dots stand for %d tasks, want every paired task: %d", dots, c.Tasks)
		}
		if rows > 0 {
			run(t, ctx, "open side by side", chromedp.Navigate(base+run(t, ctx, "link", chromedp.Evaluate[string](`document.querySelector('#flipped a').getAttribute('href')`))))
			n := run(t, ctx, "count transcripts", chromedp.Evaluate[int](`document.querySelectorAll('.pair article.transcript').length`))
			if n != 2 {
				t.Errorf("side by side shows %d transcripts", n)
			}
		}
		noConsoleErrors(t, "compare", console, from)
	})

	t.Run("report: one file, offline", func(t *testing.T) {
		from := len(console())
		d, err := Load([]string{dir}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "report.html")
		f, _ := os.Create(file)
		if err := WriteHTML(f, d, ReportOptions{PerArm: 2, MaxFailed: 50}); err != nil {
			t.Fatal(err)
		}
		f.Close()
		run(t, ctx, "open the report", chromedp.Navigate("file://"+file))
		whiskers := run(t, ctx, "count whiskers", chromedp.Evaluate[int](`document.querySelectorAll('#ci-arms g.ci-row').length`))
		if whiskers != len(ev.ByArm) {
			t.Errorf("report: %d whiskers, want %d", whiskers, len(ev.ByArm))
		}
		// Every link of the file goes to a place in the file.
		broken := run(t, ctx, "check links", chromedp.Evaluate[[]string](`[...document.querySelectorAll('a')].map(a => a.getAttribute('href')).filter(h => !h.startsWith('#') || !document.getElementById(h.slice(1)))`))
		if len(broken) > 0 {
			t.Errorf("report links out of the file: %v", broken)
		}
		failed := run(t, ctx, "count failed transcripts", chromedp.Evaluate[int](`[...document.querySelectorAll('article.transcript')].filter(a => a.querySelector('.bad')).length`))
		if failed < 5 {
			t.Errorf("%d transcripts of failed rollouts, want the fixture's 5", failed)
		}
		if p := run(t, ctx, "read __pwned", chromedp.Evaluate[string](`String(window.__pwned)`)); p != "undefined" {
			t.Errorf("injected script ran in the report: %s", p)
		}
		noConsoleErrors(t, "report", console, from)
	})
}

// TestScreenshots writes a screenshot of each page to the -screenshots directory (make
// screenshots: docs/img, from make run's output).
func TestScreenshots(t *testing.T) {
	if *screenshots == "" {
		t.Skip("no -screenshots DIR")
	}
	dirs := []string{fixtureRun(t)}
	if *shotRuns != "" {
		dirs = strings.Split(*shotRuns, ",")
	}
	base, d := serve(t, dirs...)
	ctx, console := browser(t)
	from := 0
	if err := os.MkdirAll(*screenshots, 0o755); err != nil {
		t.Fatal(err)
	}
	// A rollout with a few rounds, for the transcript.
	traj := ""
	for _, i := range d.keyOrder() {
		if r := &d.rows[i]; r.rounds >= 3 && r.fail == 0 {
			traj = serverLinks{}.trajectory(d.key(int(i)))
			break
		}
	}
	pairs := d.defaultPairs()
	shots := []struct {
		name, path string
		full       bool // the whole page, else the window
	}{
		{"view-overview", "/", true},
		{"view-rollouts", "/rollouts?sort=reward", false},
		{"view-trajectory", traj, false},
		{"view-compare", serverLinks{}.compare(pairs[0][0], pairs[0][1]), false},
	}
	for _, s := range shots {
		run(t, ctx, "open "+s.path, chromedp.Navigate(base+s.path))
		shot := chromedp.CaptureScreenshot()
		if s.full {
			shot = chromedp.FullScreenshot(100)
		}
		png := run(t, ctx, "screenshot", shot)
		if len(png) < 1000 {
			t.Fatalf("%s: a screenshot of %d bytes", s.name, len(png))
		}
		p := filepath.Join(*screenshots, s.name+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", p, len(png))
	}
	noConsoleErrors(t, "screenshots", console, from)
}
