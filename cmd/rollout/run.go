package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/rollout-dev/rollout/internal/localserve"
	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/progress"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/rundir"
	"github.com/rollout-dev/rollout/pkg/runner"
)

// syncWriter serializes writes: the interrupt notice, the progress and the
// run's own messages share stderr.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Unwrap lets progress see whether stderr is a terminal.
func (s *syncWriter) Unwrap() io.Writer { return s.w }

func cmdRun(ctx context.Context, args []string, e env) error {
	e.stderr = &syncWriter{w: e.stderr}
	f, simOptions, configArms, resumeSteps, err := parseRunFlags(args, e)
	if err != nil {
		return err
	}
	if f.claims > 0 {
		return runClaimed(ctx, args, e, f)
	}

	transport, err := newTransport(e, f.concurrency)
	if err != nil {
		return err
	}
	policy := retry.DefaultPolicy
	policy.MaxAttempts = f.retries + 1

	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	mx, err := startRunMetrics(f.metricsAddr, e)
	if err != nil {
		return err
	}
	closers = append(closers, mx.close)

	ep, err := openModel(f, simOptions, e, mx.transport(transport), policy)
	if err != nil {
		return err
	}
	closers = append(closers, ep.close)
	f.fleet.pool, f.fleet.simFleet, f.fleet.secrets = ep.pool, ep.simFleet, ep.secrets

	// The resource servers.
	routes, stops, err := buildServers(ctx, f.servers, serverSetup{
		store: f.sessionStore, ttl: f.sessionTTL, toolTimeout: f.toolTimeout, maxToolResult: f.maxToolResult, transport: mx.transport(transport), policy: policy,
		endSessions: f.endSessions, maxConns: localserve.MaxConnsFor(f.concurrency),
	})
	closers = append(closers, stops...)
	if err != nil {
		return err
	}
	routes.Warn = func(msg string) { fmt.Fprintln(e.stderr, "rollout: warning: "+msg) }

	opts, err := runOptions(f, ep, routes, configArms, resumeSteps, e.stderr)
	if err != nil {
		return err
	}
	if st, err := os.Stat(f.out); err == nil && !st.IsDir() {
		return badUsage("--out %s: not a directory", f.out)
	}
	if !f.noPreflight {
		if err := waitReady(ctx, e.stderr, f.waitReady, func() error { return preflightRun(ctx, ep, transport, routes) }); err != nil {
			return err
		}
	}
	cfg := newRunConfig(f, &opts, ep.sim)
	// A start that fails before any rollout leaves no output directory it created behind.
	_, statErr := os.Stat(f.out)
	cleanup := errors.Is(statErr, os.ErrNotExist)
	defer func() {
		if cleanup {
			os.RemoveAll(f.out)
		}
	}()
	out, err := prepareOut(f, cfg)
	if err != nil {
		return err
	}
	closers = append(closers, out.Unlock)
	opts.Done = out.Done
	if err := rundir.SetPlanned(f.out, runner.Planned(&opts)); err != nil {
		return fmt.Errorf("--out %s: %w", f.out, err)
	}
	sink, err := out.OpenSink(ep.secrets)
	if err != nil {
		return badUsage("--out %s: %v", f.out, err)
	}
	if !f.quiet {
		opts.Progress = progress.New(e.stderr, f.progressInterval)
	}
	if out.Resumed {
		printResuming(e.stderr, out)
	}
	stopNotice := context.AfterFunc(ctx, func() {
		if errors.Is(context.Cause(ctx), errClaimLost) {
			fmt.Fprintf(e.stderr, "rollout: %v: no new rollouts; running ones have %s to finish\n", errClaimLost, f.drainTimeout)
			return
		}
		fmt.Fprintf(e.stderr, "\nrollout: interrupted: no new rollouts; running ones have %s to finish. Ctrl-C again exits at once (then rollout run --resume finishes the run).\n", f.drainTimeout)
	})
	defer stopNotice()
	// The failure watch ends the run early through runCtx, as an interrupt would (no new
	// rollouts; running ones finish and are written), without the interrupt's notice.
	runCtx, endEarly := context.WithCancel(ctx)
	defer endEarly()
	watch := newFailureWatch(e.stderr, f.earlyStop, endEarly)
	rep, runErr := runner.Run(runCtx, opts, mx.attach(&opts, []runner.Output{sink, watch}, f.out, f.shard))
	closeErr := sink.Close()
	// An input read from stdin is only known to be empty now: no rollout, no earlier record.
	// A shard may have no task of a file that has some: it ends with an empty result.
	noTasks := runErr == nil && closeErr == nil && ctx.Err() == nil && rep.Started == 0 && opts.Done.Len() == 0 && !out.Resumed &&
		!(f.shard.Sharded() && f.input != "-")
	cleanup = cleanup && rep != nil && rep.Started == 0 && (runErr != nil || noTasks)
	if noTasks {
		return badUsage("--input %s: no tasks", f.input)
	}
	if runErr != nil {
		var bad *runner.BadInputError
		if errors.As(runErr, &bad) {
			return usageError{runErr}
		}
		return runErr
	}
	if closeErr != nil {
		return fmt.Errorf("writing results: %w", closeErr)
	}
	return finishRun(ctx, e, f, transport, &opts, rep, watch)
}

// finishRun ends a run whose rollouts are over: it frees what the rollouts held, derives the
// run's files from the journal, prints the results, and returns the run's outcome: interrupted,
// stopped early by the failure watch, or the --fail-on-error check.
func finishRun(ctx context.Context, e env, f runFlags, transport *runner.Transport, opts *runner.Options, rep *runner.Report, watch *failureWatch) error {
	// The rollouts are over: their idle connections (two per rollout in flight, with their
	// goroutines and buffers) and the garbage go back to the system before the journal is read
	// again, so that the end of a big run does not stack on the memory of its middle.
	transport.CloseIdleConnections()
	debug.FreeOSMemory()
	defer limitFinishMemory()()
	// The journal is the truth: the Parquet file, the summary, evaluation.json and the NeMo Gym
	// file are derived from it, over every record of the run, resumed ones included.
	complete := ctx.Err() == nil && rep.Stop == runner.StopCompleted && !watch.stopped
	endpoints, err := summaryEndpoints(f.fleet)
	if err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	fin, err := rundir.Finish(f.out, rundir.FinishOptions{NemoGym: f.jsonlOut, Complete: complete, Endpoints: endpoints})
	if err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	if err := printResults(e, f, fin, opts, rep); err != nil {
		return err
	}
	sum := fin.Summary
	if ctx.Err() != nil {
		return errInterrupted
	}
	if watch.stopped {
		return failuresError{msg: fmt.Sprintf("stopped early: the first %d rollouts all failed with %s (%s); what ran is kept in %s. Fix the cause, then finish the run with: rollout run --resume --retry-failed --out %s "+
			"(with the flags that fix it, such as another --model: every rollout so far failed, so all run again under them)",
			f.earlyStop, watch.same, record.Clip(sum.FailureMessages[string(watch.same)].Message, 300), f.out, f.out), transient: watch.same.Transient()}
	}
	return checkFailures(sum, f.failOnError, f.out)
}

// finishMemoryLimit is the soft limit on the Go runtime's memory while a run's end reads its
// journal again. What Finish keeps live is flat in the records (the Parquet writer and its
// encoders, the journal decoder's blocks, the evaluator's and the index's sorting buffers:
// about 50 MiB), but the GC's default goal lets the heap grow to twice that before it collects,
// which made the end of a big run, not its rollouts in flight, the run's peak RSS. Under this
// limit the GC collects sooner instead; past it (records with huge trajectories) the runtime
// lets the heap grow and caps the GC's share of the CPU, so the end is slower, never stopped.
const finishMemoryLimit = 96 << 20

// limitFinishMemory lowers the runtime's memory limit to finishMemoryLimit, unless it is lower
// already (GOMEMLIMIT), and returns the function that puts the limit back.
func limitFinishMemory() (restore func()) {
	prev := debug.SetMemoryLimit(-1)
	if prev <= finishMemoryLimit {
		return func() {}
	}
	debug.SetMemoryLimit(finishMemoryLimit)
	return func() { debug.SetMemoryLimit(prev) }
}

// preflightRun checks, before anything is written, that the model endpoint lists the model
// (unless it is served in this process) and that every resource server answers.
func preflightRun(ctx context.Context, ep *modelEndpoint, transport http.RoundTripper, routes runner.Servers) error {
	client := &http.Client{Transport: transport, CheckRedirect: retry.NoRedirect}
	if ep.pool != nil && !ep.local {
		if err := preflightPool(ctx, ep.pool, transport, ep.name, ep.secrets); err != nil {
			return err
		}
	} else if !ep.local {
		client := &http.Client{Transport: agent.QueryTransport(transport, ep.endpoint.Query), CheckRedirect: retry.NoRedirect}
		if err := preflightModel(ctx, client, ep.endpoint.Base, ep.apiKey, ep.name, ep.secrets); err != nil {
			return err
		}
	}
	return preflightServers(ctx, client, routes)
}

// printResults prints a finished run's summary and evaluation to stdout, and how long it took
// (and the NeMo Gym lines left out) to stderr.
func printResults(e env, f runFlags, fin rundir.Finished, opts *runner.Options, rep *runner.Report) (err error) {
	sum, ev := fin.Summary, fin.Evaluation
	if err := report.PrintSummary(e.stdout, sum); err != nil {
		return err
	}
	// The tables when there is more than one arm or repeat to tell apart; else the line
	// that says how the summary's numbers were computed.
	fmt.Fprintln(e.stdout)
	if len(opts.Arms) > 1 || opts.Repeats > 1 {
		err = ev.WriteText(e.stdout)
	} else {
		err = ev.WriteMethod(e.stdout)
	}
	if err != nil {
		return err
	}
	if f.fleet.pool != nil {
		if err := printPool(e.stdout, f.out, f.fleet.pool, f.fleet.simFleet, f.fleet.secrets); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stderr, "rollout: %d rollouts in %s; results in %s\n", rep.Started, rep.Elapsed.Round(time.Millisecond), f.out)
	if left := sum.Rollouts - fin.NemoGymLines; f.jsonlOut != "" && left > 0 {
		fmt.Fprintf(e.stderr, "rollout: %s: %d lines; %d failed rollouts left out (they have no verify answer; see rollouts.parquet)\n", f.jsonlOut, fin.NemoGymLines, left)
	}
	return nil
}
