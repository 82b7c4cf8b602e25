// Package runner runs a batch of rollouts: it streams tasks, expands
// repeats, keeps a bounded sliding window of rollouts in flight, routes each
// task to its resource server, verifies, and hands every result to one
// writer goroutine that owns the outputs, the statistics and the progress.
//
// Run is the entry point: Options say what to run and against which model (Options.Agent) and
// resource servers (Servers), and every rollout's record.Result goes to each Output (a run's
// directory, rundir.Sink, is one). Transport is the HTTP transport the rollouts of a run share.
package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/progress"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/toolclient"
	"github.com/rollout-dev/rollout/pkg/verify"
)

// Options configure a run. Validate fills defaults.
type Options struct {
	// Input is the task file ("-": stdin; .gz is decompressed).
	Input string
	// Limit keeps the first Limit tasks (0: all); Repeats is the number
	// of rollouts per task.
	Limit, Repeats int
	// IDs, when not nil, keeps only the tasks whose row "id" it holds (before Limit).
	IDs map[string]bool
	// Concurrency is the number of rollouts in flight (default 64).
	Concurrency int
	// Window, when set, bounds the rollouts in flight below Concurrency by a number that may
	// change as the run goes (pkg/fleet's adaptive limits): a rollout starts once Acquire
	// returns and Releases when it ends.
	Window Window
	// Strict refuses to start when any row is malformed.
	Strict bool
	// RolloutTimeout bounds one rollout from seed to verify (0: none).
	RolloutTimeout time.Duration
	// DrainTimeout bounds how long running rollouts may go on after the
	// run is interrupted (default 30 s); then they are cancelled.
	DrainTimeout time.Duration
	// Arm names the policy arm in the records (default "multi") when Arms is empty.
	Arm string
	// Arms are the policies run on every (task, repeat), with the same seed, so that arms differ only by policy:
	// the records' arm column tells them apart. Empty: one multi-step arm named Arm.
	Arms []Arm
	// Seed is the base of the per-(task, repeat) seeds.
	Seed int64
	// Agent is the model and loop settings.
	Agent agent.Config
	// Servers routes tasks to resource servers.
	Servers Servers
	// Progress shows the run (nil: nothing).
	Progress progress.Reporter
	// Done lists the rollouts that already have a record (a resumed run): they are skipped
	// (nil: none). Only the goroutine that reads the tasks asks it.
	Done *record.Done
	// RetryBudget is the number of retries one rollout may make in all, across its model
	// calls, seed_session and verify; negative: no budget (only each call's own policy).
	RetryBudget int
	// Shard runs only the tasks of one shard (the zero Shard: all of them).
	Shard Shard
	// OnStart, when set, is called as each rollout starts (from the rollout's goroutine): an
	// observer such as a metrics exporter counts the rollouts in flight with it.
	OnStart func()
}

// Arm is a policy with its settings, run on every task.
type Arm struct {
	Name   string // the arm column of its records; default: the policy's name
	Policy string // agent.PolicyMulti, agent.PolicySingle or agent.PolicyWorkflow
	// MaxRounds overrides Options.Agent.MaxRounds for this arm when > 0.
	MaxRounds int
	// ToolMode overrides Options.Agent.ToolMode for this arm when set (native or json).
	ToolMode string
	// Context overrides Options.Agent.Context for this arm when set (agent.ParseContext).
	Context agent.ContextStrategy
	// Degrade overrides Options.Agent.Degrade for this arm when set.
	Degrade *bool
	// Request is the arm's request options, merged after Options.Agent.Request (agent.MergePatch).
	Request json.RawMessage
}

// config is the agent configuration of the arm.
func (a Arm) config(base agent.Config) agent.Config {
	base.Policy = a.Policy
	if a.MaxRounds > 0 {
		base.MaxRounds = a.MaxRounds
	}
	if a.ToolMode != "" {
		base.ToolMode = a.ToolMode
	}
	if a.Context.Kind != "" {
		base.Context = a.Context
	}
	if a.Degrade != nil {
		base.Degrade = *a.Degrade
	}
	if len(a.Request) > 0 {
		base.ArmRequest = a.Request
	}
	return base
}

// ParseArms parses a comma-separated list of arms: policy names (single, multi, workflow).
func ParseArms(list string) ([]Arm, error) {
	var arms []Arm
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		switch name {
		case agent.PolicySingle, agent.PolicyMulti, agent.PolicyWorkflow:
			arms = append(arms, Arm{Name: name, Policy: name})
		default:
			return nil, fmt.Errorf("unknown arm %q (arms: single, multi, workflow)", name)
		}
	}
	return arms, nil
}

// Defaults.
const (
	DefaultConcurrency  = 64
	DefaultDrainTimeout = 30 * time.Second
	DefaultArm          = "multi"
)

// Validate checks the options and fills defaults.
func (o *Options) Validate() error {
	if o.Input == "" {
		return errors.New("no input: --input FILE (or - for stdin)")
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Concurrency < 1 {
		return fmt.Errorf("concurrency must be at least 1, got %d", o.Concurrency)
	}
	if o.Repeats == 0 {
		o.Repeats = 1
	}
	if o.Repeats < 1 {
		return fmt.Errorf("num-repeats must be at least 1, got %d", o.Repeats)
	}
	if o.Limit < 0 {
		return fmt.Errorf("limit must be >= 0, got %d", o.Limit)
	}
	if o.RolloutTimeout < 0 {
		return fmt.Errorf("rollout timeout must be >= 0, got %v", o.RolloutTimeout)
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	if o.Arm == "" {
		o.Arm = DefaultArm
	}
	if len(o.Arms) == 0 {
		o.Arms = []Arm{{Name: o.Arm, Policy: agent.PolicyMulti}}
	}
	seen := map[string]bool{}
	for i, a := range o.Arms {
		if a.Name == "" {
			o.Arms[i].Name = a.Policy
		}
		if seen[o.Arms[i].Name] {
			return fmt.Errorf("arm %q given twice", o.Arms[i].Name)
		}
		seen[o.Arms[i].Name] = true
		c := a.config(o.Agent)
		if err := c.Validate(); err != nil {
			return fmt.Errorf("arm %q: %w", o.Arms[i].Name, err)
		}
	}
	if err := o.Shard.Validate(); err != nil {
		return err
	}
	if o.Servers.Default == nil && len(o.Servers.ByName) == 0 {
		return errors.New("no resource server: --server URL or --server NAME=URL")
	}
	if o.Servers.warned == nil {
		o.Servers.warned = &sync.Map{}
	}
	if o.Progress == nil {
		o.Progress = progress.New(nil, 0)
	}
	return o.Agent.Validate()
}

// Servers routes a task to a resource server: by its agent_ref.name, else
// the default one.
type Servers struct {
	Default *toolclient.Server
	ByName  map[string]*toolclient.Server
	// Warn, when set, is told once per agent_ref.name that matches none of the named servers
	// while a default one takes its rows (a typo in NAME=URL would send them to the wrong
	// server without a word).
	Warn   func(msg string)
	warned *sync.Map // the names warned about; set by Options.Validate
}

// For returns the server of a task and the agent name for its record.
func (s Servers) For(t *dataset.Task) (*toolclient.Server, string, error) {
	if t.AgentRef != nil {
		if srv, ok := s.ByName[t.AgentRef.Name]; ok {
			return srv, t.AgentRef.Name, nil
		}
		if s.Default != nil && len(s.ByName) > 0 && s.Warn != nil && s.warned != nil {
			if _, done := s.warned.LoadOrStore(t.AgentRef.Name, true); !done {
				s.Warn(fmt.Sprintf("agent_ref.name %q (%s:%d) matches no named --server (%s): its rows go to the default server %s",
					t.AgentRef.Name, t.File, t.Line, s.names(), s.Default.Name))
			}
		}
	}
	if s.Default != nil {
		name := s.Default.Name
		if t.AgentRef != nil {
			name = t.AgentRef.Name
		}
		return s.Default, name, nil
	}
	if t.AgentRef == nil {
		return nil, "", fmt.Errorf("the row has no agent_ref.name and no default --server URL is set (named servers: %s)", s.names())
	}
	return nil, "", fmt.Errorf("no --server for agent_ref.name %q (named servers: %s)", t.AgentRef.Name, s.names())
}

func (s Servers) names() string {
	var n []string
	for k := range s.ByName {
		n = append(n, k)
	}
	sort.Strings(n)
	return strings.Join(n, ", ")
}

// StopReason says why a run ended.
type StopReason string

// Stop reasons.
const (
	StopCompleted   StopReason = "completed"
	StopInterrupted StopReason = "interrupted"
)

// Report is what a run returns.
type Report struct {
	Summary report.Summary
	Stop    StopReason
	// Started counts rollouts started; every one of them has a record.
	Started int
	Elapsed time.Duration
}

// BadInputError is a run refused for its input (--strict, unreadable).
type BadInputError struct{ Msg string }

func (e *BadInputError) Error() string { return e.Msg }

// Planned is the number of rollouts a run of o plans in all (those of o.Done included): its
// tasks (after Limit and Shard) times Repeats times the arms; -1 when the input cannot be
// counted beforehand (stdin).
func Planned(o *Options) int {
	n, err := dataset.Count(o.Input)
	if err != nil || n < 0 {
		return -1
	}
	if o.IDs != nil {
		n = min(n, len(o.IDs))
	}
	if o.Limit > 0 {
		n = min(n, o.Limit)
	}
	return o.Shard.Tasks(n) * o.Repeats * len(o.Arms)
}

// Run runs every rollout of the input and writes each result to every
// output. It returns when all started rollouts have a record. When ctx is
// cancelled (Ctrl-C) no new rollout starts; running ones get DrainTimeout
// to finish, then are cancelled and recorded as such. Outputs are not
// closed: the caller does that.
func Run(ctx context.Context, o Options, outputs []Output) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := CheckInput(&o); err != nil {
		return nil, err
	}
	total := Planned(&o)
	if total >= 0 {
		total = max(total-o.Done.Len(), 0)
	}
	rd, err := dataset.Open(o.Input)
	if err != nil {
		return nil, &BadInputError{Msg: err.Error()}
	}
	defer rd.Close()

	// Rollouts run under runCtx, which outlives ctx by DrainTimeout.
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	stopDrain := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(o.DrainTimeout, cancelRun)
		context.AfterFunc(runCtx, func() { t.Stop() })
	})
	defer stopDrain()

	results := make(chan *record.Result, o.Concurrency)
	var stats report.Stats
	var writeErr error
	written := make(chan struct{})
	go func() {
		defer close(written)
		for res := range results {
			stats.Add(&res.Record)
			for _, out := range outputs {
				if err := out.Write(res); err != nil && writeErr == nil {
					writeErr = err
					cancelRun() // an output that cannot write loses data: stop
				}
			}
			o.Progress.Update(status(&stats, total))
		}
	}()

	r := newRun(&o)
	p := pool.New().WithMaxGoroutines(o.Concurrency)
	var started atomic.Int64
	readErr := dataset.Each(rd, dataset.Options{Limit: o.Limit, Repeats: o.Repeats, IDs: o.IDs}, func(t *dataset.Task, k int) error {
		if ctx.Err() != nil || runCtx.Err() != nil {
			return errStop
		}
		if !o.Shard.Has(t.Index) {
			return nil
		}
		for i, arm := range o.Arms {
			if o.Done.Has(record.Key{Task: int64(t.Index), Rollout: int64(k), Arm: arm.Name}) {
				continue
			}
			// Go blocks until a slot is free: a sliding window.
			p.Go(func() {
				// An interrupt while this rollout waited for its slot: it
				// does not start (and has no record; a resume runs it).
				if ctx.Err() != nil || runCtx.Err() != nil {
					return
				}
				if o.Window != nil {
					if o.Window.Acquire(runCtx) != nil {
						return // interrupted while waiting: as above
					}
					defer o.Window.Release()
				}
				started.Add(1)
				if o.OnStart != nil {
					o.OnStart()
				}
				results <- r.rollout(runCtx, t, k, i)
			})
		}
		return nil
	})
	p.Wait()
	close(results)
	<-written
	o.Progress.Finish(status(&stats, total))

	rep := &Report{Summary: stats.Summary(), Stop: StopCompleted, Started: int(started.Load()), Elapsed: time.Since(start)}
	if ctx.Err() != nil {
		rep.Stop = StopInterrupted
	}
	if writeErr != nil {
		return rep, fmt.Errorf("writing results: %w", writeErr)
	}
	if readErr != nil && readErr != errStop {
		return rep, &BadInputError{Msg: fmt.Sprintf("reading tasks stopped after %d rollouts: %v", rep.Started, readErr)}
	}
	return rep, nil
}

var errStop = errors.New("stop")

// Window is a bound on the rollouts in flight that may change (Options.Window).
type Window interface {
	Acquire(ctx context.Context) error
	Release()
}

// CheckInput checks that the input can be read and, with Strict, that every
// row is well-formed (a full pass over the file), so that a caller can
// refuse a bad input before it creates any output. Run calls it; after a
// successful check it clears Strict, so that the pass is not made twice.
func CheckInput(o *Options) error {
	if !o.Strict {
		return nil
	}
	if o.Input == "-" {
		return &BadInputError{Msg: "--strict needs a file: it reads the input twice"}
	}
	errs, _, err := dataset.Validate(o.Input, 20)
	if err != nil {
		return &BadInputError{Msg: err.Error()}
	}
	if len(errs) > 0 {
		return &BadInputError{Msg: fmt.Sprintf("--strict: malformed rows, nothing run (first %d shown):\n%s", len(errs), dataset.FormatRowErrors(errs))}
	}
	o.Strict = false
	return nil
}

func status(s *report.Stats, total int) progress.Status {
	done, scored, failed, mean := s.Progress()
	return progress.Status{Done: done, Total: total, Failed: failed, MeanReward: mean, Scored: scored}
}

type run struct {
	o *Options
	// cfgs are the arms' agent configurations, in o.Arms' order, made once for the run.
	cfgs []*agent.Config
}

func newRun(o *Options) *run {
	r := &run{o: o, cfgs: make([]*agent.Config, len(o.Arms))}
	for i, a := range o.Arms {
		c := a.config(o.Agent)
		r.cfgs[i] = &c
	}
	return r
}

// rollout runs one (task, rollout index) of arm i: seed_session, the agent loop, verify. It
// always returns a result; failures are fields of its record.
//
// Its frame, and those of the calls it waits in, are kept small: a rollout's goroutine waits
// most of its life in a model or tool call, and a goroutine's stack is kept at the power of two
// above the deepest it has been, and the GC counts the stack in use into its goal. The record is
// written in place in the result, the arm's configuration is the run's, and the work before
// and after the agent loop is done in functions of their own.
func (r *run) rollout(ctx context.Context, t *dataset.Task, k, i int) *record.Result {
	res := &record.Result{}
	rec := &res.Record
	start := time.Now()
	defer func() { rec.LatencyMs = float64(time.Since(start).Microseconds()) / 1000 }()
	arm := &r.o.Arms[i]
	r.newRecord(rec, t, k, arm)
	sess, ctx, done := r.open(ctx, t, k, arm, rec)
	if sess == nil {
		return res
	}
	defer done()
	tr := r.cfgs[i].Run(ctx, t, sess, rec.Seed)
	defer func() {
		// The trajectory ends as the record does: a failed verify is the rollout's end too.
		tr.Termination, tr.FailureClass, tr.Error = agent.Termination(rec.Termination), rec.FailureClass, rec.Error
		// The direct encoder: the bytes of json.Marshal(tr), without reflection or re-compaction.
		if b, err := tr.MarshalJSON(); err == nil {
			res.Trajectory = b
		}
	}()
	r.score(ctx, t, k, arm, r.cfgs[i], sess, tr, res)
	return res
}

// newRecord fills in the record's fields known before the rollout starts.
//
//go:noinline
func (r *run) newRecord(rec *record.Record, t *dataset.Task, k int, arm *Arm) {
	o := r.o
	*rec = record.Record{
		TaskIndex: int64(t.Index), RolloutIndex: int64(k), TaskID: t.ID, Arm: arm.Name, Model: o.Agent.ModelName,
		StartedAt: time.Now().UTC(), Seed: Seed(o.Seed, t.Index, k), SourceFile: t.File, SourceLine: int64(t.Line),
	}
	rec.TaskFields = taskFields(t)
	if t.ID == "" {
		rec.TaskHash = rowHash(t.Raw)
	}
}

// open starts the rollout: its context (timeout, rollout id, attempt counter, retry budget) and
// its session with the resource server, seeded. sess is nil when the rollout ends there (a bad
// task, no server, a failed seed_session), its failure in rec. done ends the session, counts
// the attempts into rec and releases the context.
//
//go:noinline
func (r *run) open(parent context.Context, t *dataset.Task, k int, arm *Arm, rec *record.Record) (sess *toolclient.Session, ctx context.Context, done func()) {
	o := r.o
	if t.Err != nil {
		rec.Termination, rec.FailureClass, rec.Error = "", record.FailBadTask, t.Err.Error()
		return nil, nil, nil
	}
	srv, agentName, err := o.Servers.For(t)
	rec.Agent = agentName
	if err != nil {
		rec.FailureClass, rec.Error = record.FailBadTask, fmt.Sprintf("%s:%d: %v", t.File, t.Line, err)
		return nil, nil, nil
	}
	ctx, cancel := parent, context.CancelFunc(func() {})
	if o.RolloutTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, o.RolloutTimeout)
	}
	ctx = agent.WithRolloutID(ctx, rolloutID(arm.Name, t.File, t.Index, k))
	counter := new(retry.Counter)
	ctx = retry.WithCounter(ctx, counter)
	if o.RetryBudget >= 0 {
		ctx = retry.WithBudget(ctx, o.RetryBudget)
	}
	sess = srv.NewSession()
	done = func() {
		sess.End(ctx) //nolint:errcheck // best-effort cleanup; the record does not depend on it
		rec.Attempts = int32(counter.Attempts())
		cancel()
	}
	if err := sess.Seed(ctx, t.Raw); err != nil {
		rec.FailureClass, rec.Error = callFailure(ctx, err, record.FailResourceServer), err.Error()
		rec.Termination = string(termination(rec.FailureClass, agent.ToolError))
		done()
		return nil, nil, nil
	}
	return sess, ctx, done
}

// score fills the record from the trajectory and, when the loop did not fail, verifies the
// rollout's answer with the resource server.
//
//go:noinline
func (r *run) score(ctx context.Context, t *dataset.Task, k int, arm *Arm, cfg *agent.Config, sess *toolclient.Session, tr *agent.Trajectory, res *record.Result) {
	o, rec := r.o, &res.Record
	calls, failed, names := tr.ToolCalls()
	rec.Rounds, rec.ToolCalls, rec.ToolErrors, rec.ToolNames = int32(len(tr.Rounds)), int32(calls), int32(failed), names
	rec.PromptTokens, rec.CompletionTokens = int64(tr.Usage.PromptTokens), int64(tr.Usage.CompletionTokens)
	rec.Termination, rec.FailureClass, rec.Error = string(tr.Termination), tr.FailureClass, tr.Error
	if len(tr.Rounds) > 0 {
		rec.Endpoint = tr.Rounds[0].Endpoint
	}
	contextColumns(rec, cfg, tr)
	if tr.FailureClass != "" {
		return
	}

	resp := agent.BuildResponse(responseID(t.Index, k, arm.Name), float64(rec.StartedAt.Unix()), o.Agent.ModelName, t.Params, tr)
	// The direct encoder: json.Marshal's bytes, without reflection or its compaction pass.
	rb, err := resp.MarshalJSON()
	if err != nil { // cannot happen: the response is plain data
		rec.FailureClass, rec.Error = record.FailVerify, err.Error()
		return
	}
	body := verifyRow(t).AppendObject(make([]byte, 0, len(t.Raw)+len(rb)+16), []string{"response"}, dataset.Field{Key: "response", Value: rb})
	keys := make([]string, len(t.Fields))
	for i, f := range t.Fields {
		keys[i] = f.Key
	}
	v, err := verify.Remote(ctx, sess, body, keys)
	if err != nil {
		var fallback record.FailureClass = record.FailVerify
		if verify.SessionLost(err) || verify.SessionTampered(err) {
			// the server lost the session, or its state was altered in the store: not a score;
			// run it again
			fallback = record.FailResourceServer
		}
		rec.FailureClass, rec.Error = callFailure(ctx, err, fallback), err.Error()
		rec.Termination = string(termination(rec.FailureClass, agent.VerifyError))
		return
	}
	rec.Reward, rec.HasReward, rec.RewardComponents = v.Reward, true, v.Components
	res.Verify = v.Answer
}

// verifyRow is the row as /verify gets it: its responses_create_params without the chat request
// options a NeMo Gym server refuses (dataset.Params.VerifyParams); t itself when it has none.
func verifyRow(t *dataset.Task) *dataset.Task {
	vp, changed := t.Params.VerifyParams()
	if !changed {
		return t
	}
	c := *t
	c.Fields = slices.Clone(t.Fields)
	for i := range c.Fields {
		if c.Fields[i].Key == "responses_create_params" {
			c.Fields[i].Value = vp
		}
	}
	return &c
}

// contextColumns fills the record's context columns when the arm has a context strategy or
// degrades: the strategy, each round's prompt tokens (from the endpoint's usage) and the
// largest, what the strategy removed, and the briefing calls.
func contextColumns(rec *record.Record, cfg *agent.Config, tr *agent.Trajectory) {
	if cfg.Context.Kind == "" && !cfg.Degrade {
		return
	}
	rec.Context = cfg.Context.String()
	rec.ContextTokens = make([]int64, len(tr.Rounds))
	for i, rd := range tr.Rounds {
		rec.ContextTokens[i] = int64(rd.Usage.PromptTokens)
		rec.ContextTokensMax = max(rec.ContextTokensMax, rec.ContextTokens[i])
	}
	if ct := tr.Context; ct != nil {
		for _, cr := range ct.Rounds {
			rec.ContextRemovedMessages += int32(cr.RemovedMessages)
			rec.ContextRemovedBytes += int64(cr.RemovedBytes)
		}
		rec.BriefingCalls = int32(len(ct.Briefings))
	}
}

// Bounds of the task fields kept in a record.
const (
	maxTaskFields     = 16
	maxTaskFieldBytes = 128
)

// taskFields are the row's scalar top-level fields other than id, up to maxTaskFields of at
// most maxTaskFieldBytes each: strings unquoted, numbers and booleans as written. Objects,
// arrays and nulls (responses_create_params, agent_ref, expected lists…) are left out.
func taskFields(t *dataset.Task) map[string]string {
	var m map[string]string
	for _, f := range t.Fields {
		v := bytes.TrimSpace(f.Value)
		if f.Key == "id" || len(v) == 0 || len(v) > maxTaskFieldBytes+2 || len(m) >= maxTaskFields {
			continue
		}
		var text string
		switch v[0] {
		case '{', '[', 'n':
			continue
		case '"':
			if json.Unmarshal(v, &text) != nil || len(text) > maxTaskFieldBytes {
				continue
			}
		default:
			text = string(v)
		}
		if m == nil {
			m = map[string]string{}
		}
		m[f.Key] = text
	}
	return m
}

// ctxFailure names a failure by the rollout's context when it ended: a
// deadline is a timeout, a cancel is cancelled, else it is fallback.
func ctxFailure(ctx context.Context, fallback record.FailureClass) record.FailureClass {
	switch ctx.Err() {
	case context.DeadlineExceeded:
		return record.FailTimeout
	case context.Canceled:
		return record.FailCancelled
	}
	return fallback
}

// callFailure names the failure of a seed_session or verify call: as the rollout's context
// says when it ended; a timeout when the call's own deadline ran out; else fallback.
func callFailure(ctx context.Context, err error, fallback record.FailureClass) record.FailureClass {
	if class := ctxFailure(ctx, ""); class != "" {
		return class
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return record.FailTimeout
	}
	return fallback
}

// termination is how a rollout that failed outside the agent loop ended.
func termination(class record.FailureClass, otherwise agent.Termination) agent.Termination {
	switch class {
	case record.FailTimeout:
		return agent.Timeout
	case record.FailCancelled:
		return agent.Cancelled
	}
	return otherwise
}

// responseID is the Responses id of a rollout: its key.
func responseID(task, rollout int, arm string) string {
	return fmt.Sprintf("resp_%s_%d_%d", arm, task, rollout)
}

// rowHash is record.Record.TaskHash of a row without id: the first 16 hex digits of the
// SHA-256 of its bytes.
func rowHash(raw []byte) string {
	h := sha256.Sum256(raw)
	return hex.EncodeToString(h[:8])
}

// rolloutID names rollout (arm, task, k) in its model requests' wire.RolloutIDHeader:
// "ARM/FILE/TASK/K", the arm's name and the task file's path query-escaped (a valid header
// value whatever they hold).
func rolloutID(arm, file string, task, k int) string {
	return url.QueryEscape(arm) + "/" + url.QueryEscape(file) + "/" + strconv.Itoa(task) + "/" + strconv.Itoa(k)
}

// Seed is the seed of rollout (task, k): the same in every arm and run with
// the same base, different across keys (splitmix64 of the key). It fits in
// 31 bits, which every server's seed parameter accepts.
func Seed(base int64, task, k int) int64 {
	x := uint64(base) ^ uint64(task)*0x9E3779B97F4A7C15 ^ uint64(k)*0xC2B2AE3D27D4EB4F
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	x ^= x >> 31
	return int64(x & 0x7fffffff)
}
