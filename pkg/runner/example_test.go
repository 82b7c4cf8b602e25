package runner_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/runner"
	"github.com/rollout-dev/rollout/pkg/servers"
	"github.com/rollout-dev/rollout/pkg/sim"
	"github.com/rollout-dev/rollout/pkg/toolclient"
)

// collect is an Output that keeps every record in memory. Run calls Write from its one writer
// goroutine, which has ended when Run returns: no lock is needed.
type collect struct{ recs []record.Record }

func (c *collect) Write(r *record.Result) error {
	c.recs = append(c.recs, r.Record)
	return nil
}

func (c *collect) Close() error { return nil }

// counterTask is a task of the built-in counter server: increment the counter by one, n times
// (the reference plan the simulator plays), then the server checks the count against expected.
func counterTask(id string, n, expected int) string {
	rounds := ""
	for i := range n {
		if i > 0 {
			rounds += ","
		}
		rounds += `[{"name":"increment_counter","arguments":{"count":1}}]`
	}
	return fmt.Sprintf(`{"id":%q,"responses_create_params":{"input":[{"role":"user","content":"Increment the counter %d times, then say its value."}],`+
		`"tools":[{"type":"function","name":"increment_counter","parameters":{"type":"object","properties":{"count":{"type":"integer"}},"required":["count"]}}]},`+
		`"initial_count":0,"expected_count":%d,"reference_plan":{"rounds":[%s],"final":"The counter is at %d."}}`+"\n",
		id, n, expected, rounds, n)
}

// A whole batch in one process: three tasks, two rollouts each, against the built-in counter
// resource server, with the model simulator (which plays each task's reference plan) as the
// model endpoint. Each result goes to the Outputs; the Report has the run's summary. Task
// "off-by-one" expects a count its plan does not reach, so the server's verify scores it 0.
func ExampleRun() {
	dir, err := os.MkdirTemp("", "runner-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	tasks := filepath.Join(dir, "tasks.jsonl")
	rows := counterTask("once", 1, 1) + counterTask("twice", 2, 2) + counterTask("off-by-one", 2, 3)
	if err := os.WriteFile(tasks, []byte(rows), 0o644); err != nil {
		panic(err)
	}

	// The resource server and the model, each on a loopback port.
	counter, err := servers.New("counter", servers.Options{})
	if err != nil {
		panic(err)
	}
	resourceServer := httptest.NewServer(counter)
	defer resourceServer.Close()
	plans, err := sim.LoadTasks(tasks)
	if err != nil {
		panic(err)
	}
	simulator, err := sim.New(plans, sim.Options{})
	if err != nil {
		panic(err)
	}
	model := httptest.NewServer(simulator)
	defer model.Close()

	transport := runner.NewTransport(4)
	server, err := toolclient.New("counter", resourceServer.URL, transport)
	if err != nil {
		panic(err)
	}
	doer := &retry.Doer{Client: &http.Client{Transport: transport}, Policy: retry.Policy{MaxAttempts: 3}}
	out := &collect{}
	rep, err := runner.Run(context.Background(), runner.Options{
		Input:       tasks,
		Repeats:     2,
		Concurrency: 4,
		Servers:     runner.Servers{Default: server},
		Agent:       agent.Config{Model: agent.NewOpenAIModel(model.URL+"/v1", "", doer), ModelName: "rollout-sim"},
	}, []runner.Output{out})
	if err != nil {
		panic(err)
	}

	// Rollouts finish in any order; sort them for printing.
	sort.Slice(out.recs, func(i, j int) bool {
		a, b := out.recs[i], out.recs[j]
		return a.TaskIndex < b.TaskIndex || a.TaskIndex == b.TaskIndex && a.RolloutIndex < b.RolloutIndex
	})
	for _, r := range out.recs {
		fmt.Printf("%-10s #%d  %s  rounds %d  tool calls %d  reward %g\n", r.TaskID, r.RolloutIndex, r.Termination, r.Rounds, r.ToolCalls, r.Reward)
	}
	fmt.Printf("%s: %d rollouts, mean reward %.3f\n", rep.Stop, rep.Summary.Rollouts, rep.Summary.MeanReward)
	// Output:
	// once       #0  completed  rounds 2  tool calls 1  reward 1
	// once       #1  completed  rounds 2  tool calls 1  reward 1
	// twice      #0  completed  rounds 3  tool calls 2  reward 1
	// twice      #1  completed  rounds 3  tool calls 2  reward 1
	// off-by-one #0  completed  rounds 3  tool calls 2  reward 0
	// off-by-one #1  completed  rounds 3  tool calls 2  reward 0
	// completed: 6 rollouts, mean reward 0.667
}
