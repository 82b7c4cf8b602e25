// Command rollout runs batches of multi-step tool-using agent rollouts
// against OpenAI-compatible model endpoints and NeMo Gym resource servers,
// and writes rewards to Parquet.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailure     = 1   // the run could not write its results
	exitUsage       = 2   // bad flags, config, input or output directory
	exitChecks      = 3   // a check failed: validate found problems
	exitFailures    = 4   // run: more rollouts failed than --fail-on-error allows, or the run stopped early
	exitTransient   = 5   // run: as 4, but every failure is transient (the endpoints or servers had a bad moment): a retry may succeed
	exitInterrupted = 130 // Ctrl-C: what ran is written
)

// env is the process's outside world, injected so that the CLI is testable.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

// redisQuiet drops go-redis's own log lines (dial retries and the like): the session store
// returns its errors, and the CLI reports them once, in its own words.
type redisQuiet struct{}

func (redisQuiet) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(redisQuiet{}) }

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel() // the first: drain
		// The second exits at once. Not by giving the signal back to its default: a job started
		// in the background of a shell (cmd &) inherits SIGINT ignored, and Go restores that.
		<-sigs
		fmt.Fprintln(os.Stderr, "\nrollout: interrupted again: exiting now; rollout run --resume finishes the run")
		os.Exit(exitInterrupted)
	}()
	code := run(ctx, os.Args[1:], env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv})
	signal.Stop(sigs)
	os.Exit(code)
}

const usage = `rollout runs multi-step tool-using agent rollouts and scores them.

Usage:
  rollout run --input FILE --model-url URL --model NAME --server URL [flags]
  rollout serve NAME [--addr 127.0.0.1:PORT] [--session-store redis://HOST:PORT/DB]
  rollout sim [--tasks FILE]... [--addr 127.0.0.1:PORT] [knobs]
  rollout validate FILE... [--oracle] [--server URL|NAME=URL|builtin:NAME]
  rollout compare RUN_A RUN_B | RUN --arms A,B [--format text|json|markdown]
  rollout gen NAME [--seed N] [--n N] [--out FILE]
  rollout report DIR|FILE... [--group-by FIELD] [--format text|json|markdown] [flags]
  rollout merge --out DIR SHARD_DIR... [--partial]
  rollout show DIR --task ID [--repeat K] [--arm ARM]
  rollout view DIR [DIR...] [--addr 127.0.0.1:8080]
  rollout export DIR... --format rl|sft|preference|nemo-gym -o FILE [flags]
  rollout version
  rollout help [COMMAND]

Start with the simulator, no model or key needed:
  rollout run --input data/extraction.jsonl --model-url builtin:sim --server builtin:extraction

'rollout COMMAND --help' gives a command's flags, examples, environment and exit codes.

Exit codes: 0 sound run; 1 results not written; 2 bad usage or a preflight answer a retry cannot change; 3 validate found
problems; 4 failed rollouts past --fail-on-error (or an early stop); 5 the same, every failure transient
(unreachable, rate-limited, timed out): a later retry may succeed; 130 interrupted.
`

// commands are the commands of rollout, for "did you mean".
var commands = []string{"run", "serve", "sim", "gen", "validate", "compare", "report", "merge", "show", "view", "export", "help", "version"}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, e env) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usage)
		return exitUsage
	}
	if addr := e.getenv("ROLLOUT_DEBUG_ADDR"); addr != "" {
		stop, err := startDebug(addr, e.stderr)
		if err != nil {
			return exitCode(usageError{err}, e.stderr)
		}
		defer stop()
	}
	if path := e.getenv("ROLLOUT_CPUPROFILE"); path != "" {
		stop, err := startCPUProfile(path)
		if err != nil {
			return exitCode(usageError{err}, e.stderr)
		}
		defer stop()
	}
	var err error
	switch args[0] {
	case "run":
		err = cmdRun(ctx, args[1:], e)
	case "serve":
		err = cmdServe(ctx, args[1:], e)
	case "sim":
		err = cmdSim(ctx, args[1:], e)
	case "gen":
		err = cmdGen(ctx, args[1:], e)
	case "validate":
		err = cmdValidate(ctx, args[1:], e)
	case "compare":
		err = cmdCompare(ctx, args[1:], e)
	case "report":
		err = cmdReport(ctx, args[1:], e)
	case "merge":
		err = cmdMerge(ctx, args[1:], e)
	case "show":
		err = cmdShow(ctx, args[1:], e)
	case "view":
		err = cmdView(ctx, args[1:], e)
	case "export":
		err = cmdExport(ctx, args[1:], e)
	case "version", "--version":
		fmt.Fprintln(e.stdout, versionString())
		return exitOK
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			return run(ctx, []string{args[1], "-h"}, e)
		}
		fmt.Fprint(e.stdout, usage)
		return exitOK
	default:
		msg := fmt.Sprintf("rollout: unknown command %q", args[0])
		if near := closest(args[0], commands); len(near) > 0 {
			msg += " (did you mean " + strings.Join(near, " or ") + "?)"
		}
		fmt.Fprintf(e.stderr, "%s; rollout help lists the commands\n", msg)
		return exitUsage
	}
	return exitCode(err, e.stderr)
}

// usageError is a bad flag, config, input or output directory.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func badUsage(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// errInterrupted: the run stopped on a signal; its results are written.
var errInterrupted = errors.New("interrupted: running rollouts were drained and written; rollouts not started have no record")

// errInterruptedEarly: the run was interrupted before it started (in the preflight); nothing
// was written.
var errInterruptedEarly = errors.New("interrupted before the run started: nothing was written")

// errHelp: -h was asked; the usage is printed.
var errHelp = errors.New("help")

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	if errors.Is(err, errHelp) {
		return exitOK
	}
	fmt.Fprintf(stderr, "rollout: %v\n", err)
	return exitOf(err)
}

// exitOf is the exit code of err, a command's error.
func exitOf(err error) int {
	if err == nil {
		return exitOK
	}
	var u usageError
	switch {
	case errors.As(err, new(transientError)):
		return exitTransient
	case errors.As(err, &u):
		return exitUsage
	case errors.Is(err, errInterrupted), errors.Is(err, errInterruptedEarly):
		return exitInterrupted
	case errors.Is(err, errCheckFailed):
		return exitChecks
	}
	var fe failuresError
	if errors.As(err, &fe) {
		if fe.transient {
			return exitTransient
		}
		return exitFailures
	}
	return exitFailure
}

// parseNamed parses the arguments of a command that takes one NAME, before or after its flags
// ("rollout serve NAME --addr …" or "rollout serve --addr … NAME"). name is "" when none was
// given; a second argument is a usage error.
func parseNamed(fs *flag.FlagSet, args []string, e env) (name string, err error) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args, e); err != nil {
		return "", err
	}
	rest := fs.Args()
	if name == "" && len(rest) > 0 {
		name, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		return "", badUsage("%s: unexpected argument %q", fs.Name(), rest[0])
	}
	return name, nil
}
