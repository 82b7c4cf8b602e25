package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A documented example: a console block of README.md or docs/*.md marked <!-- tested -->,
// whose "$ " lines are commands and whose other lines are their output.
type docBlock struct {
	file string
	line int
	cmds []docCmd
}

type docCmd struct {
	line int
	cmd  string
	want []string
}

// docBlocks reads the tested blocks of a Markdown file: a line <!-- tested --> (or
// <!-- tested: slow -->, which -short skips, or <!-- tested: nemo-gym -->, which needs the
// Python packages of examples/cart_nemo_gym), then a ```console block. kinds holds each
// block's "", "slow" or "nemo-gym".
func docBlocks(t *testing.T, path string) (blocks []docBlock, kinds []string) {
	t.Helper()
	lines := strings.Split(readFile(t, path), "\n")
	for i := 0; i < len(lines); i++ {
		mark := strings.TrimSpace(lines[i])
		kind, ok := map[string]string{"<!-- tested -->": "", "<!-- tested: slow -->": "slow", "<!-- tested: nemo-gym -->": "nemo-gym"}[mark]
		if !ok {
			continue
		}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "```console" {
			t.Errorf("%s:%d: %s is not followed by a ```console block", path, i+1, mark)
			continue
		}
		b := docBlock{file: path, line: i + 2}
		for i += 2; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			if cmd, ok := strings.CutPrefix(lines[i], "$ "); ok {
				b.cmds = append(b.cmds, docCmd{line: i + 1, cmd: cmd})
			} else if len(b.cmds) > 0 {
				b.cmds[len(b.cmds)-1].want = append(b.cmds[len(b.cmds)-1].want, lines[i])
			} else {
				t.Errorf("%s:%d: output before any $ command", path, i+1)
			}
		}
		blocks = append(blocks, b)
		kinds = append(kinds, kind)
	}
	return blocks, kinds
}

// docMasks are the numbers that vary from run to run: durations, timestamps, and numbers with
// one decimal (latencies and their means; token means, which do not vary, go with them).
var docMasks = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?Z?`), "<time>"},
	{regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|us|ms|s|m| ms)\b`), "<duration>"},
	{regexp.MustCompile(`\b\d+\.\d\b`), "<n.n>"},
	{regexp.MustCompile(`\s+`), " "},
}

func maskDoc(s string) string {
	for _, m := range docMasks {
		s = m.re.ReplaceAllString(s, m.with)
	}
	return strings.TrimSpace(s)
}

// matchDoc says whether the output got has the lines want, masked; a line "..." in want
// stands for any lines.
func matchDoc(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if strings.TrimSpace(want[0]) == "..." {
		for i := 0; i <= len(got); i++ {
			if matchDoc(want[1:], got[i:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && maskDoc(want[0]) == maskDoc(got[0]) && matchDoc(want[1:], got[1:])
}

// copyRepo copies the files git tracks (and those of this change not yet committed) to dir.
func copyRepo(t *testing.T, root, dir string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (the documented commands run in a copy of the repository)", err)
	}
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		src := filepath.Join(root, f)
		b, err := os.ReadFile(src)
		if err != nil {
			continue // deleted in the work tree
		}
		mode := os.FileMode(0o644)
		if fi, err := os.Stat(src); err == nil && fi.Mode()&0o100 != 0 {
			mode = 0o755 // scripts the documented commands run, such as examples/cart_nemo_gym/serve.sh
		}
		dst := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, mode); err != nil {
			t.Fatal(err)
		}
	}
}

// waitAddr waits until a background command's --addr accepts connections.
func waitAddr(cmd string) {
	m := regexp.MustCompile(`--addr (\S+)`).FindStringSubmatch(cmd)
	if m == nil {
		return
	}
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", m[1]); err == nil {
			c.Close()
			return
		}
	}
}

// Every command block of README.md and docs/*.md that claims an output (marked
// <!-- tested -->) is run, in a copy of the repository with bin/rollout built from it and on
// the PATH as rollout, and its output (stdout and stderr) must be the documented one, with
// times and other varying numbers masked. A command ending in & runs in the background until
// the block ends (and, with --addr HOST:PORT, is waited for until it listens there).
func TestDocumentedOutputs(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var all []docBlock
	var kinds []string
	for _, f := range files {
		b, k := docBlocks(t, f)
		all, kinds = append(all, b...), append(kinds, k...)
	}
	if len(all) == 0 {
		t.Fatal("no tested blocks in README.md and docs/*.md")
	}
	dir := t.TempDir()
	copyRepo(t, root, dir)
	if out, err := exec.Command("go", "build", "-C", dir, "-o", "bin/rollout", "./cmd/rollout").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The commands run as a reader's would: not inside make (make test sets MAKELEVEL, which
	// makes a nested make print "Entering directory").
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKELEVEL" && k != "MAKEFLAGS" && k != "MFLAGS" && k != "PATH" {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+filepath.Join(dir, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	for i, b := range all {
		name := fmt.Sprintf("%s:%d", strings.TrimPrefix(b.file, root+"/"), b.line)
		t.Run(name, func(t *testing.T) {
			env := env
			switch kinds[i] {
			case "slow":
				if testing.Short() {
					t.Skip("slow (-short)")
				}
			case "nemo-gym":
				env = append(env, "PYTHON="+nemoGymPython(t))
			}
			var background []*exec.Cmd
			defer func() {
				for _, c := range background {
					syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
					c.Wait()
				}
			}()
			for _, c := range b.cmds {
				if bg, ok := strings.CutSuffix(strings.TrimSpace(c.cmd), "&"); ok {
					cmd := exec.Command("bash", "-c", bg)
					cmd.Dir, cmd.Env = dir, env
					cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
					if err := cmd.Start(); err != nil {
						t.Fatalf("line %d: %v", c.line, err)
					}
					background = append(background, cmd)
					waitAddr(bg)
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				cmd := exec.CommandContext(ctx, "bash", "-c", "{ "+c.cmd+"\n} 2>&1")
				cmd.Dir, cmd.Env = dir, env
				out, _ := cmd.Output()
				cancel()
				got := strings.Split(strings.TrimRight(string(bytes.TrimRight(out, "\n")), "\n"), "\n")
				if len(out) == 0 {
					got = nil
				}
				if !matchDoc(c.want, got) {
					t.Errorf("%s:%d: $ %s\nthe documented output:\n%s\nthe output now:\n%s", b.file, c.line, c.cmd, strings.Join(c.want, "\n"), out)
				}
			}
		})
	}
}

// The masks and the "..." lines: what a documented output may differ in, and what not.
func TestMatchDoc(t *testing.T) {
	for _, c := range []struct {
		want, got string
		ok        bool
	}{
		{"rollout: 4 rollouts in 8ms; results in out", "rollout: 4 rollouts in 1.2s; results in out", true},
		{"mean latency     6.1 ms", "mean latency     1346.7 ms", true},
		{"mean reward      1.0000", "mean reward      0.9000", false},
		{"tasks 4", "tasks 5", false},
		{"started 2026-11-25 00:42:56Z · 1851 ms", "started 2026-11-26 21:02:07Z · 23 ms", true},
		{"a\n...\nd", "a\nb\nc\nd", true},
		{"a\n...\nd", "a\nb\nc", false},
		{"a\nb", "a\nb\nc", false},
	} {
		if got := matchDoc(strings.Split(c.want, "\n"), strings.Split(c.got, "\n")); got != c.ok {
			t.Errorf("matchDoc(%q, %q) = %v", c.want, c.got, got)
		}
	}
}

// Every relative link of README.md and docs/*.md names a file of the repository.
func TestDocLinks(t *testing.T) {
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md", "../../CONTRIBUTING.md")
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	for _, f := range files {
		for _, m := range link.FindAllStringSubmatch(readFile(t, f), -1) {
			if strings.Contains(m[1], "://") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), m[1])); err != nil {
				t.Errorf("%s: a link to %s: %v", f, m[1], err)
			}
		}
	}
}
