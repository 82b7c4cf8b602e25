package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// cmdShow prints one rollout of a run: its record (reward and components, termination,
// failure) and its transcript (messages, tool calls with their status and latency, results).
func cmdShow(_ context.Context, args []string, e env) error {
	fs := newFlagSet("rollout show", e, commandHelp{
		usage: "rollout show DIR --task ID [--repeat K] [--arm ARM]",
		about: `Prints one rollout of the run in DIR: its reward and reward components, termination and
failure (from journal.jsonl), then its transcript (from trajectories.jsonl): every message,
each tool call with its arguments, status and latency, and the tool's result; with a context
strategy, its columns and the briefings.`,
		examples: []string{"rollout show out/extraction --task extraction-0013 --arm multi"},
	})
	task := fs.String("task", "", "the task's `ID` (its id field, or its 0-based index in the input)")
	repeat := fs.Int("repeat", 0, "which repeat of the task (`K`, from 0)")
	arm := fs.String("arm", "", "the `ARM`, when the run has several")
	width := fs.Int("max-text", 2000, "show at most `N` bytes of each message (0: all, up to 256 KiB a text: a longer one is cut there with its size)")
	dir, err := parseNamed(fs, args, e)
	if err != nil {
		return err
	}
	if dir == "" {
		return badUsage("show: which run directory? rollout show DIR --task ID")
	}
	if *task == "" {
		return badUsage("show: --task ID is required")
	}
	if _, err := rundir.HasJournal(dir); err != nil {
		return badUsage("show: %s holds no run (%v)", dir, errors.Unwrap(err))
	}
	// The records of the task: by id, or by index when no id matches.
	var recs []record.Record
	ids := map[string]bool{}
	err = rundir.ScanJournalOf(dir, func(r *record.Record) error {
		ids[r.TaskID] = true
		if r.TaskID == *task || fmt.Sprint(r.TaskIndex) == *task {
			recs = append(recs, *r)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("show: %w", err)
	}
	if len(recs) == 0 {
		msg := fmt.Sprintf("show: no rollout of task %q in %s", *task, dir)
		if near := closest(*task, slices.Sorted(maps.Keys(ids))); len(near) > 0 {
			msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(near, " or "))
		}
		return badUsage("%s", msg)
	}
	arms := map[string]bool{}
	var rec *record.Record
	for i := range recs {
		r := &recs[i]
		arms[r.Arm] = true
		if int(r.RolloutIndex) == *repeat && (*arm == "" || r.Arm == *arm) {
			if rec != nil {
				return badUsage("show: task %s repeat %d was run by several arms (%s): choose one with --arm", *task, *repeat, strings.Join(slices.Sorted(maps.Keys(arms)), ", "))
			}
			rec = r
		}
	}
	if rec == nil {
		return badUsage("show: task %s has no rollout with --repeat %d%s in %s (arms %s)", *task, *repeat, map[bool]string{true: " --arm " + *arm}[*arm != ""], dir,
			strings.Join(slices.Sorted(maps.Keys(arms)), ", "))
	}
	traj, err := findTrajectory(dir, rec)
	if err != nil {
		return fmt.Errorf("show: %w", err)
	}
	return printRollout(e.stdout, rec, traj, *width)
}

// findTrajectory reads the trajectory of rec from the run's trajectories file, through its
// offset index, as it streams, each text longer than rundir.MaxShownString cut with a note of
// its size (nil when it has none).
func findTrajectory(dir string, rec *record.Record) (*agent.Trajectory, error) {
	trajs, err := rundir.OpenTrajectories(dir)
	if err != nil {
		return nil, err
	}
	raw, ok, err := trajs.Clipped(rec.TaskIndex, rec.RolloutIndex, rec.Arm, rundir.MaxShownString)
	if err != nil || !ok {
		return nil, err
	}
	var tr *agent.Trajectory
	if err := json.Unmarshal(raw, &tr); err != nil {
		return nil, fmt.Errorf("%s: task %d rollout %d arm %s: %v", trajs.Path(), rec.TaskIndex, rec.RolloutIndex, rec.Arm, err)
	}
	return tr, nil
}

// printRollout writes a rollout for people: the record, then the transcript.
func printRollout(w io.Writer, r *record.Record, tr *agent.Trajectory, max int) error {
	bw := bufio.NewWriter(w)
	clip := func(s string) string {
		if max > 0 {
			return record.Clip(s, max)
		}
		return strings.TrimSpace(s)
	}
	fmt.Fprintf(bw, "task %s (index %d) · repeat %d · arm %s · model %s · server %s\n", r.TaskID, r.TaskIndex, r.RolloutIndex, r.Arm, r.Model, r.Agent)
	fmt.Fprintf(bw, "source %s:%d · seed %d · started %s · %.0f ms · %d attempts\n", r.SourceFile, r.SourceLine, r.Seed, r.StartedAt.Format("2006-01-02 15:04:05Z"), r.LatencyMs, r.Attempts)
	if r.HasReward && r.FailureClass == "" {
		fmt.Fprintf(bw, "reward %g", r.Reward)
		if len(r.RewardComponents) > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(r.RewardComponents)) {
				parts = append(parts, fmt.Sprintf("%s %g", k, r.RewardComponents[k]))
			}
			fmt.Fprintf(bw, " (%s)", strings.Join(parts, ", "))
		}
		fmt.Fprintln(bw)
	} else {
		fmt.Fprintf(bw, "reward - (failed: %s)\n", r.FailureClass)
	}
	fmt.Fprintf(bw, "termination %s · %d rounds · %d tool calls, %d failed · %d prompt + %d completion tokens\n",
		orDash(r.Termination), r.Rounds, r.ToolCalls, r.ToolErrors, r.PromptTokens, r.CompletionTokens)
	if r.Context != "" {
		fmt.Fprintf(bw, "context %s · prompt tokens by round %v · left out %d messages, %d bytes · %d briefing calls\n",
			r.Context, r.ContextTokens, r.ContextRemovedMessages, r.ContextRemovedBytes, r.BriefingCalls)
	}
	if r.Error != "" {
		fmt.Fprintf(bw, "error %s\n", r.Error)
	}
	if tr == nil {
		fmt.Fprintln(bw, "\n(no transcript: the rollout has no trajectory line)")
		return bw.Flush()
	}
	// Each tool call's status and latency, by call id, from the rounds.
	calls := map[string]agent.ToolCall{}
	for _, rd := range tr.Rounds {
		for _, c := range rd.ToolCalls {
			calls[c.CallID] = c
		}
	}
	fmt.Fprintln(bw)
	for _, m := range tr.Messages {
		switch {
		case m.Role == "tool":
			c, ok := calls[m.ToolCallID]
			head := "tool " + m.Name
			if ok {
				head = fmt.Sprintf("tool %s → %s, %.1f ms", c.Name, c.StatusText(), c.LatencyMs)
			}
			fmt.Fprintf(bw, "[%s]\n%s\n\n", head, indent(clip(m.Content)))
		default:
			fmt.Fprintf(bw, "[%s]\n", m.Role)
			if strings.TrimSpace(m.Content) != "" {
				fmt.Fprintf(bw, "%s\n", indent(clip(m.Content)))
			}
			for _, part := range m.MultiContent {
				if part.Text != "" {
					fmt.Fprintf(bw, "%s\n", indent(clip(part.Text)))
				}
			}
			if m.ReasoningContent != "" {
				fmt.Fprintf(bw, "  (reasoning) %s\n", clip(m.ReasoningContent))
			}
			for _, tc := range m.ToolCalls {
				fmt.Fprintf(bw, "  → %s(%s)\n", tc.Function.Name, clip(tc.Function.Arguments))
			}
			fmt.Fprintln(bw)
		}
	}
	if tr.Context != nil {
		for _, b := range tr.Context.Briefings {
			fmt.Fprintf(bw, "[briefing after round %d, %d prompt + %d completion tokens]\n%s\n\n", b.Round, b.Usage.PromptTokens, b.Usage.CompletionTokens, indent(clip(b.Text)))
		}
	}
	fmt.Fprintf(bw, "ended: %s", orDash(string(tr.Termination)))
	if tr.Error != "" {
		fmt.Fprintf(bw, " (%s)", tr.Error)
	}
	fmt.Fprintln(bw)
	return bw.Flush()
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
