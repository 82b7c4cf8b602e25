package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"
)

// parseFlags parses args with fs. Asked for help (-h, --help), it prints the command's help
// (fs.Usage, written to fs.Output()) on stdout and returns errHelp; a bad flag is one line, with
// the closest flag names for an unknown one, and never the whole flag list.
func parseFlags(fs *flag.FlagSet, args []string, e env) error {
	usage := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	if err == nil {
		return nil
	}
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(e.stdout)
		fs.Usage()
		return errHelp
	}
	return usageError{flagError(fs, err)}
}

// flagError rewrites the flag package's error as one line that names the flag as --NAME and
// points to the command's help: "run: unknown flag --concurency (did you mean --concurrency?);
// rollout run --help lists the flags".
func flagError(fs *flag.FlagSet, err error) error {
	cmd := strings.TrimPrefix(fs.Name(), "rollout ")
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		name = strings.TrimLeft(name, "-")
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		msg = "unknown flag --" + name
		if near := closest(name, names); len(near) > 0 {
			msg += " (did you mean --" + strings.Join(near, " or --") + "?)"
		}
	} else {
		// "invalid value "x" for flag -concurrency: parse error", "flag needs an argument: -out"
		msg = strings.Replace(msg, "flag -", "flag --", 1)
		msg = strings.Replace(msg, "argument: -", "argument: --", 1)
	}
	return fmt.Errorf("%s: %s; %s --help lists the flags", cmd, msg, fs.Name())
}

// flagGroup is a heading of a command's help and the flags under it. A flag named in no group
// is listed under "Other flags", so that a new flag is never left out of the help.
type flagGroup struct {
	title string
	names []string
	// brief lists the group's flags on one line each without their descriptions (the
	// simulator's knobs: rollout sim --help describes them), then brief; compact lists them so
	// without a brief (the title says what they are).
	brief   string
	compact bool
}

// commandHelp is what `rollout CMD --help` prints: a synopsis, what the command does, its
// flags in groups, examples, the environment and the exit codes. Without groups (a command of
// a few flags) it is the synopsis, what the command does, the examples, then every flag.
type commandHelp struct {
	usage, about string
	groups       []flagGroup
	examples     []string
	environment  []string
	exitCodes    []string
}

// write prints h with the flags of fs.
func (h commandHelp) write(w io.Writer, fs *flag.FlagSet) { h.print(w, fs, false) }

// writeAll prints h with every flag of fs described, the compact groups too (--help-all).
func (h commandHelp) writeAll(w io.Writer, fs *flag.FlagSet) { h.print(w, fs, true) }

// askedHelpAll says whether args, before any "--", ask for --help-all.
func askedHelpAll(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--help-all" || a == "-help-all" {
			return true
		}
	}
	return false
}

func (h commandHelp) print(w io.Writer, fs *flag.FlagSet, all bool) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", h.usage, strings.TrimRight(h.about, "\n"))
	section := func(title string, lines []string) {
		if len(lines) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s:\n", title)
		for _, l := range lines {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	examples := "Examples"
	if len(h.examples) == 1 {
		examples = "Example"
	}
	if len(h.groups) == 0 {
		section(examples, h.examples)
		fmt.Fprintln(w)
		printFlags(w, fs)
		return
	}
	listed := map[string]bool{}
	for _, g := range h.groups {
		for _, n := range g.names {
			listed[n] = true
		}
	}
	var other []string
	fs.VisitAll(func(f *flag.Flag) {
		if !listed[f.Name] {
			other = append(other, f.Name)
		}
	})
	groups := h.groups
	if len(other) > 0 {
		groups = append(slices.Clone(groups), flagGroup{title: "Other flags", names: other})
	}
	for _, g := range groups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		if !all && (g.brief != "" || g.compact) {
			var names []string
			for _, n := range g.names {
				if fs.Lookup(n) != nil {
					names = append(names, "--"+n)
				}
			}
			fmt.Fprintf(w, "%s\n", wrap(strings.Join(names, ", "), "  ", 100))
			if g.brief != "" {
				fmt.Fprintf(w, "%s\n", wrap(g.brief, "  ", 100))
			}
			continue
		}
		for _, n := range g.names {
			if f := fs.Lookup(n); f != nil {
				writeFlag(w, f)
			}
		}
	}
	section(examples, h.examples)
	section("Environment", h.environment)
	section("Exit codes", h.exitCodes)
}

// writeFlag prints one flag: "  --name ARG" and its usage, with the default when it is not the
// zero value, wrapped under it.
func writeFlag(w io.Writer, f *flag.Flag) {
	arg, usage := flag.UnquoteUsage(f)
	head := "  --" + f.Name
	if len(f.Name) == 1 {
		head = "  -" + f.Name
	}
	if arg != "" {
		head += " " + arg
	}
	if d := f.DefValue; d != "" && d != "0" && d != "false" && d != "0s" && d != "[]" {
		usage += fmt.Sprintf(" (default %s)", d)
	}
	const col = 28
	if len(head) < col-1 {
		fmt.Fprintf(w, "%-*s%s\n", col, head, strings.TrimPrefix(wrap(usage, strings.Repeat(" ", col), 100), strings.Repeat(" ", col)))
		return
	}
	fmt.Fprintf(w, "%s\n%s\n", head, wrap(usage, strings.Repeat(" ", col), 100))
}

// wrap fills text into lines of at most width bytes, each starting with indent.
func wrap(text, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, word := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	b.WriteString(line)
	return b.String()
}

// exitCodeHelp documents the exit codes; main.go's constants are the truth.
var exitCodeHelp = []string{
	"0    the run is sound: its failed rollouts are within --fail-on-error",
	"1    the results could not be written (disk, permissions)",
	"2    bad usage: a flag, the config, the input, --out, or the preflight (model, URL, key)",
	"3    rollout validate found problems",
	"4    more rollouts failed than --fail-on-error allows, or the first --early-stop failed alike",
	"5    as 4 but every failure transient, or not up within --wait-ready, or --out locked: retry",
	"130  interrupted (Ctrl-C): what ran is written; --resume finishes the run",
}

// versionString is the module's version and the VCS revision it was built from.
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "rollout (no build information)"
	}
	s := "rollout " + bi.Main.Version
	var rev, at string
	dirty := false
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			rev = kv.Value
		case "vcs.time":
			at = kv.Value
		case "vcs.modified":
			dirty = kv.Value == "true"
		}
	}
	if rev != "" {
		s += " revision " + rev
		if dirty {
			s += " (modified)"
		}
		if at != "" {
			s += " of " + at
		}
	}
	return s + ", " + bi.GoVersion
}

// printFlags lists every flag of fs, by name, as --NAME ARG and its usage.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "Flags:")
	fs.VisitAll(func(f *flag.Flag) { writeFlag(w, f) })
}

// renameFlags rewrites the old names of flags in args (--seed, -seed=1, ...) to their new ones,
// so that old command lines keep working while the help names only the new flags. Arguments
// after "--" are left alone.
func renameFlags(args []string, renames map[string]string) []string {
	out := make([]string, len(args))
	copy(out, args)
	for i, a := range out {
		if a == "--" {
			break
		}
		dashes := len(a) - len(strings.TrimLeft(a, "-"))
		if dashes == 0 || dashes > 2 {
			continue
		}
		name, value, hasValue := strings.Cut(a[dashes:], "=")
		if to, ok := renames[name]; ok {
			out[i] = "--" + to
			if hasValue {
				out[i] += "=" + value
			}
		}
	}
	return out
}

// newFlagSet is the flag set of the command name, whose help (--help, written by parseFlags on
// stdout) is h with the flags of the set.
func newFlagSet(name string, e env, h commandHelp) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() { h.write(fs.Output(), fs) }
	return fs
}
