package loadbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/dataset"
)

// Ceiling is the simulator's HTTP ceiling on this machine, measured by a standard load
// generator replaying the first model request of a task at zero latency.
type Ceiling struct {
	Tool        string // "wrk" or "hey"; "" when neither is installed
	Command     string // the load generator's command line
	Connections int
	Duration    time.Duration
	Requests    int64
	RPS         float64
	Errors      int64 // non-2xx answers and socket errors
	Sim         Usage // the simulator's rusage over the measurement
	Skipped     string
}

// FirstRequest is the body of the first model call of a task of the shape, as the runner
// builds it (go-openai's encoding of the task's messages and tools).
func FirstRequest(s TaskShape) ([]byte, error) {
	rd, err := dataset.NewReader(strings.NewReader(`{"id":0`+s.taskTail()), "bench")
	if err != nil {
		return nil, err
	}
	t, err := rd.Next()
	if err != nil {
		return nil, err
	}
	if t.Err != nil {
		return nil, t.Err
	}
	seed := 1
	return json.Marshal(openai.ChatCompletionRequest{
		Model: "rollout-sim", Messages: agent.ChatMessages(t.Params), Tools: agent.ChatTools(t.Params.Tools), Seed: &seed,
	})
}

// MeasureCeiling starts the simulator at zero latency and loads it with wrk (else hey) for d
// at the given number of connections.
func MeasureCeiling(ctx context.Context, c Config, s TaskShape, conns int, d time.Duration) (*Ceiling, error) {
	res := &Ceiling{Connections: conns, Duration: d}
	wrk, _ := exec.LookPath("wrk")
	hey, _ := exec.LookPath("hey")
	if hey == "" { // go install puts it in GOPATH/bin, which may not be on PATH
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			if p := filepath.Join(strings.TrimSpace(string(out)), "bin", "hey"); fileExists(p) {
				hey = p
			}
		}
	}
	if wrk == "" && hey == "" {
		res.Skipped = "neither wrk nor hey is installed (apt-get install wrk, or go install github.com/rakyll/hey@latest)"
		return res, nil
	}
	sim, dir, body, err := startBareSim(ctx, c, "ceiling", s)
	if err != nil {
		return nil, err
	}
	url := sim.URL + "/chat/completions"
	var cmd *exec.Cmd
	if wrk != "" {
		script := filepath.Join(dir, "post.lua")
		lua := "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nwrk.body = " + strconv.Quote(string(body)) + "\n"
		if err := os.WriteFile(script, []byte(lua), 0o644); err != nil {
			sim.stop()
			return nil, err
		}
		res.Tool = "wrk"
		cmd = exec.CommandContext(ctx, wrk, "-t", "2", "-c", strconv.Itoa(conns), "-d", fmt.Sprintf("%ds", int(d.Seconds())), "-s", script, url)
	} else {
		bodyFile := filepath.Join(dir, "body.json")
		if err := os.WriteFile(bodyFile, body, 0o644); err != nil {
			sim.stop()
			return nil, err
		}
		res.Tool = "hey"
		cmd = exec.CommandContext(ctx, hey, "-z", d.String(), "-c", strconv.Itoa(conns), "-m", "POST", "-T", "application/json", "-D", bodyFile, url)
	}
	res.Command = strings.Join(cmd.Args, " ")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	res.Sim = sim.stop()
	if runErr != nil {
		return nil, fmt.Errorf("%s: %v\n%s", res.Tool, runErr, out.String())
	}
	if err := os.WriteFile(filepath.Join(dir, res.Tool+".txt"), out.Bytes(), 0o644); err != nil {
		return nil, err
	}
	if res.Tool == "wrk" {
		err = parseWrk(out.String(), res)
	} else {
		err = parseHey(out.String(), res)
	}
	return res, err
}

var (
	wrkRequests = regexp.MustCompile(`(\d+) requests in`)
	wrkRPS      = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	wrkNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkSocket   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	heyRPS      = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	heyStatus   = regexp.MustCompile(`\[(\d{3})\]\s+(\d+) responses`)
)

func parseWrk(out string, c *Ceiling) error {
	m := wrkRPS.FindStringSubmatch(out)
	n := wrkRequests.FindStringSubmatch(out)
	if m == nil || n == nil {
		return fmt.Errorf("wrk: no Requests/sec in its output:\n%s", out)
	}
	c.RPS, _ = strconv.ParseFloat(m[1], 64)
	c.Requests, _ = strconv.ParseInt(n[1], 10, 64)
	if e := wrkNon2xx.FindStringSubmatch(out); e != nil {
		v, _ := strconv.ParseInt(e[1], 10, 64)
		c.Errors += v
	}
	if e := wrkSocket.FindStringSubmatch(out); e != nil {
		for _, s := range e[1:] {
			v, _ := strconv.ParseInt(s, 10, 64)
			c.Errors += v
		}
	}
	return nil
}

func parseHey(out string, c *Ceiling) error {
	m := heyRPS.FindStringSubmatch(out)
	if m == nil {
		return fmt.Errorf("hey: no Requests/sec in its output:\n%s", out)
	}
	c.RPS, _ = strconv.ParseFloat(m[1], 64)
	for _, s := range heyStatus.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseInt(s[2], 10, 64)
		c.Requests += v
		if s[1][0] != '2' {
			c.Errors += v
		}
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// startBareSim starts the simulator at zero latency in c.Dir/name, knowing the plan of tasks
// of the shape, and returns it with the first model request of such a task.
func startBareSim(ctx context.Context, c Config, name string, s TaskShape) (sim *server, dir string, body []byte, err error) {
	dir = filepath.Join(c.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", nil, err
	}
	planFile := filepath.Join(dir, "plan.jsonl")
	if err := os.WriteFile(planFile, []byte(`{"id":0`+s.taskTail()), 0o644); err != nil {
		return nil, "", nil, err
	}
	if body, err = FirstRequest(s); err != nil {
		return nil, "", nil, err
	}
	sim, err = startServer(ctx, "rollout sim", c.Bin, c.env(dir, "sim"), "sim", "--tasks", planFile)
	return sim, dir, body, err
}
