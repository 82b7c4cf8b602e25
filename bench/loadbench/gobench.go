package loadbench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
)

// GoBench is one line of `go test -bench` output.
type GoBench struct {
	Package string
	Name    string // without the -GOMAXPROCS suffix
	N       int64
	// Metrics by unit: "ns/op", "B/op", "allocs/op", "MB/s", and custom ones ("records/s").
	Metrics map[string]float64
	Units   []string // in the order printed
}

// RunGoBench runs the Go benchmarks of pkgs (go test -run '^$' -bench . -benchmem) with the
// given -benchtime ("" for the default) and parses them; raw receives the output as it comes.
func RunGoBench(ctx context.Context, benchtime string, pkgs []string, raw io.Writer) ([]GoBench, error) {
	args := []string{"test", "-run", "^$", "-bench", ".", "-benchmem", "-count", "1"}
	if benchtime != "" {
		args = append(args, "-benchtime", benchtime)
	}
	args = append(args, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	var out bytes.Buffer
	w := io.Writer(&out)
	if raw != nil {
		w = io.MultiWriter(&out, raw)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go %s: %v", strings.Join(args, " "), err)
	}
	return ParseGoBench(&out), nil
}

// ParseGoBench reads `go test -bench` output: "pkg:" lines name the package of the lines after.
func ParseGoBench(r io.Reader) []GoBench {
	var res []GoBench
	pkg := ""
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		b := GoBench{Package: pkg, Name: name, N: n, Metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			b.Metrics[f[i+1]] = v
			b.Units = append(b.Units, f[i+1])
		}
		res = append(res, b)
	}
	return res
}

// Find returns the first benchmark named name (or whose name starts with name+"/").
func Find(bs []GoBench, name string) *GoBench {
	for i := range bs {
		if bs[i].Name == name || strings.HasPrefix(bs[i].Name, name+"/") {
			return &bs[i]
		}
	}
	return nil
}
