package validate

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/plan"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/runner"
	"github.com/rollout-dev/rollout/pkg/sim"
)

// OracleOptions configure the oracle check.
type OracleOptions struct {
	// Servers routes the tasks to their resource servers, as in a run.
	Servers runner.Servers
	// Concurrency is the number of rollouts in flight (default 32).
	Concurrency int
	// RolloutTimeout bounds each rollout (default 1 minute).
	RolloutTimeout time.Duration
	// Transport carries the model calls (nil: a new one).
	Transport http.RoundTripper
}

// OracleReport is what the oracle check found.
type OracleReport struct {
	Tasks    int // tasks with a reference plan
	Rollouts int // rollouts played: each plan, then each plan without each required call
	Problems []Problem
}

// Oracle proves, task by task, that the reference plans of the file at path solve their tasks
// and that every call they require is needed. It plays each task's plan through the simulator,
// with no errors, against the task's resource server, as `rollout run` would, and expects
// reward 1; then, for each required call of the plan in turn, it plays the plan without that
// call (later references to it resolve to null) and expects a reward below 1. Each way a task
// falls short is a Problem located at its line. Rows without a plan are not checked (Lint
// reports malformed ones).
func Oracle(ctx context.Context, path string, o OracleOptions) (*OracleReport, error) {
	if o.Concurrency <= 0 {
		o.Concurrency = 32
	}
	if o.RolloutTimeout <= 0 {
		o.RolloutTimeout = time.Minute
	}
	if o.Transport == nil {
		o.Transport = runner.NewTransport(o.Concurrency)
	}
	tasks, err := plannedTasks(path)
	if err != nil {
		return nil, err
	}
	rep := &OracleReport{Tasks: len(tasks)}
	if len(tasks) == 0 {
		return rep, nil
	}
	dir, err := os.MkdirTemp("", "rollout-oracle-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	// Pass -1 plays the plans whole; pass k drops call k of every plan that requires it. Each
	// pass is its own run: the simulator knows a task by its first user message, so one run
	// holds one variant of each task.
	most, rounds := 0, 0
	for _, t := range tasks {
		most = max(most, t.plan.NumCalls())
		rounds = max(rounds, len(t.plan.Rounds))
	}
	for pass := -1; pass < most; pass++ {
		var batch []*oracleTask
		var rows [][]byte
		for _, t := range tasks {
			row := t.task.Raw
			if pass >= 0 {
				if pass >= t.plan.NumCalls() || t.plan.Calls()[pass].Optional {
					continue
				}
				dropped, err := t.plan.Drop(pass)
				if err != nil {
					// The plan's only call: without it there is nothing to play, so
					// the task cannot score.
					continue
				}
				pj, err := json.Marshal(dropped)
				if err != nil {
					return nil, err
				}
				row = t.task.AppendObject(nil, []string{plan.Field}, dataset.Field{Key: plan.Field, Value: pj})
			}
			batch = append(batch, t)
			rows = append(rows, row)
		}
		if len(batch) == 0 {
			continue
		}
		recs, err := playPass(ctx, filepath.Join(dir, fmt.Sprintf("pass%d.jsonl", pass+1)), rows, rounds, o)
		if err != nil {
			return rep, err
		}
		rep.Rollouts += len(recs)
		for i, t := range batch {
			rec, ok := recs[i]
			problem := func(format string, args ...any) {
				rep.Problems = append(rep.Problems, Problem{File: t.task.File, Line: t.task.Line, TaskID: t.task.ID, Field: plan.Field, Msg: fmt.Sprintf(format, args...)})
			}
			what := "the reference plan"
			if pass >= 0 {
				what = fmt.Sprintf("without call %d (%s)", pass, t.plan.Calls()[pass].Name)
			}
			switch {
			case !ok:
				problem("%s: no record (the run stopped early)", what)
			case rec.FailureClass != "":
				problem("%s: the rollout failed (%s): %s", what, rec.FailureClass, record.Clip(rec.Error, 300))
			case pass < 0 && rec.Reward < 1:
				problem("%s scores %g, want 1 (%s)", what, rec.Reward, components(rec))
			case pass >= 0 && rec.Reward >= 1:
				problem("%s the reward is still %g: the call is not needed (mark it \"optional\": true, or make the task need it)", what, rec.Reward)
			}
		}
	}
	return rep, nil
}

type oracleTask struct {
	task *dataset.Task
	plan *plan.Plan
}

func plannedTasks(path string) ([]*oracleTask, error) {
	var out []*oracleTask
	err := dataset.ReadFile(path, func(t *dataset.Task) error {
		raw := t.Field(plan.Field)
		if t.Err != nil || raw == nil || isNull(raw) {
			return nil
		}
		if p, err := plan.Parse(raw); err == nil { // Lint reports the others
			out = append(out, &oracleTask{task: t, plan: p})
		}
		return nil
	})
	return out, err
}

// playPass writes rows to path and runs them through the simulator and the servers; it returns
// the records by position in rows.
// The rollouts may take rounds+2 rounds: the plan's rounds, the final answer, and one to spare.
func playPass(ctx context.Context, path string, rows [][]byte, rounds int, o OracleOptions) (map[int]record.Record, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriter(f)
	for _, r := range rows {
		w.Write(r)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	ts, err := sim.LoadTasks(path)
	if err != nil {
		return nil, err
	}
	s, err := sim.New(ts, sim.Options{})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	doer := &retry.Doer{Client: &http.Client{Transport: o.Transport, CheckRedirect: retry.NoRedirect}, Policy: retry.DefaultPolicy}
	model := agent.NewOpenAIModel("http://"+ln.Addr().String()+"/v1", "", doer)
	out := &collect{recs: map[int]record.Record{}}
	_, err = runner.Run(ctx, runner.Options{
		Input:          path,
		Concurrency:    o.Concurrency,
		RolloutTimeout: o.RolloutTimeout,
		Arm:            "oracle",
		Agent:          agent.Config{Model: model, ModelName: sim.ModelID, MaxRounds: rounds + 2},
		Servers:        o.Servers,
	}, []runner.Output{out})
	return out.recs, err
}

// collect keeps the records of a pass.
type collect struct {
	mu   sync.Mutex
	recs map[int]record.Record
}

func (c *collect) Write(r *record.Result) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs[int(r.Record.TaskIndex)] = r.Record
	return nil
}

func (c *collect) Close() error { return nil }

func components(r record.Record) string {
	if len(r.RewardComponents) == 0 {
		return "no reward components"
	}
	b, _ := json.Marshal(r.RewardComponents)
	return "components " + string(b)
}
