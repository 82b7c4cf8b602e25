package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/internal/durable"
	"github.com/rollout-dev/rollout/internal/localserve"
	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/rundir"
	"github.com/rollout-dev/rollout/pkg/view"
)

// cmdView serves the web pages of one or more runs on a local address (pkg/view).
func cmdView(ctx context.Context, args []string, e env) error {
	fs := newFlagSet("rollout view", e, commandHelp{
		usage: "rollout view DIR [DIR...] [--addr 127.0.0.1:8080] [--group-by FIELD]",
		about: `Serves a local web app over the runs in the DIRs (several runs, or the shards of one, are read in
turn): an overview (mean reward with its 95% CI per arm, pass@k and pass^k, terminations and
failure classes, histograms, the settings), the rollouts table (sorted, filtered and paged on the
server), each rollout's transcript, and the comparison of two arms or runs. It prints the URL and
opens nothing; Ctrl-C stops it. The pages need no network and run no script. It listens on
loopback unless --addr names another address, and answers GET only, and only a Host that names
it (its address, loopback's, --allow-host's): any other gets 421.`,
		examples: []string{"rollout view out/extraction", "rollout view out/extraction out/workflow --addr 127.0.0.1:9090"},
	})
	addr := fs.String("addr", "127.0.0.1:8080", "listen on `HOST:PORT` (a port of 0 picks a free one)")
	allowHosts := fs.String("allow-host", "", "answer requests for these `NAMES` too (comma-separated host names the pages are reached by; the address's own host and loopback's are always answered, any other Host gets 421)")
	groupBy := fs.String("group-by", "", "also give the scores per value of this task `FIELD` (as rollout report); a field no record has is refused")
	baseline := fs.String("baseline", "", "with several runs: the `RUN` the others are compared with in the overview's table of runs (its directory as given, or its number from 1; default the first)")
	paths, err := parsePaths(fs, args, e)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return badUsage("view: which run directory? rollout view DIR")
	}
	// The shards of a sharded run must all be there and finished (as for rollout report); each
	// directory is then read in turn.
	if _, err := runArgs(paths); err != nil {
		return badUsage("view: %v", err)
	}
	if paths, err = rundir.ExpandDirs(paths); err != nil {
		return badUsage("view: %v", err)
	}
	o := view.Options{Stats: report.StatsOptions{GroupBy: *groupBy}, StatsSet: *groupBy != ""}
	if *baseline != "" {
		runs := make([]runArg, len(paths))
		for i, p := range paths {
			runs[i] = runArg{name: p, path: p}
		}
		if o.Baseline, err = pickBaseline(runs, *baseline); err != nil {
			return badUsage("view: %v", strings.TrimPrefix(err.Error(), "report: "))
		}
	}
	start := time.Now()
	d, err := view.Load(paths, o)
	if err != nil {
		return usageError{fmt.Errorf("view: %w", err)}
	}
	ln, err := localserve.Listen(*addr, 0)
	if err != nil {
		return badUsage("view: %v", err)
	}
	// The pages answer only a Host that names this server (against DNS rebinding: a page of
	// another site must not reach it by a name of its own), on any address.
	var extra []string
	if *allowHosts != "" {
		extra = strings.Split(*allowHosts, ",")
	}
	hosts := localserve.Hosts(ln.Addr().String(), extra...)
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		fmt.Fprintf(e.stderr, "rollout: warning: view listens on %s, not loopback: anyone who reaches it sees the transcripts; it answers the Host names %s (--allow-host adds more)\n", ln.Addr(), strings.Join(hosts, ", "))
	}
	// A run being written is read again as its journal grows; the overview reloads itself.
	h, err := view.NewFollow(paths, o, d, hosts)
	if err != nil {
		ln.Close()
		return fmt.Errorf("view: %w", err)
	}
	h.Reloaded = func(d *view.Data, err error) {
		if err != nil {
			fmt.Fprintf(e.stderr, "rollout: view: reading the runs again: %v (the pages show the last reading)\n", err)
			return
		}
		fmt.Fprintf(e.stderr, "rollout: view: read the runs again: %d rollouts\n", d.Rollouts())
	}
	for _, r := range d.Runs {
		if r.Status != "" {
			fmt.Fprintf(e.stderr, "rollout: %s: %s\n", r.Dir, r.Status)
		}
	}
	fmt.Fprintf(e.stderr, "rollout: %d rollouts of %d run(s) read in %.1f s\n", d.Rollouts(), len(paths), time.Since(start).Seconds())
	fmt.Fprintf(e.stdout, "http://%s/\n", ln.Addr())
	fmt.Fprintf(e.stderr, "rollout: view on http://%s/ (Ctrl-C to stop)\n", ln.Addr())
	return serveUntilDone(ctx, ln, h)
}

// writeHTMLReport writes the one-file report of rollout report --html.
func writeHTMLReport(paths []string, o report.StatsOptions, statsSet bool, file string, ro view.ReportOptions) error {
	if expanded, err := rundir.ExpandDirs(paths); err == nil {
		if err := rundir.CheckOutput(rundir.Output{Flag: "--html", Path: file}, rundir.ReadsOf(expanded...)...); err != nil {
			return badUsage("report: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Dir(file)); err != nil {
		return usageError{fmt.Errorf("report: --html: %w", err)}
	}
	d, err := view.Load(paths, view.Options{Stats: o, StatsSet: statsSet})
	if err != nil {
		return usageError{fmt.Errorf("report: %w", err)}
	}
	// Written beside the file and renamed into place: a failure leaves what was there.
	if err := durable.WriteAtomic(file, 0o644, func(w io.Writer) error { return view.WriteHTML(w, d, ro) }); err != nil {
		return fmt.Errorf("report: --html %s: %w", file, err)
	}
	return nil
}
