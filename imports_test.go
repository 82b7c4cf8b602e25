// Package rollout_test checks the layers of the module: which package may import which, as
// docs/ARCHITECTURE.md states them ("Layers and import rules").
package rollout_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/rollout-dev/rollout"

// goPackage is what the rules read of one package of `go list -json`.
type goPackage struct {
	ImportPath   string
	Name         string
	Imports      []string // of its non-test files
	Deps         []string // every package its non-test files link, transitively
	TestImports  []string
	XTestImports []string
}

// fixtures are the test fixtures: packages that only tests (and other fixtures) import. Every
// package whose non-test files import "testing" must be one of them.
var fixtures = map[string]bool{
	"internal/testnet":        true,
	"internal/redistest":      true,
	"pkg/record/recordtest":   true,
	"internal/hfrender":       true,
	"internal/benchutil":      true,
	"pkg/servers/gym/gymtest": true,
}

// pkgRules are the rules among the packages of pkg/, on their non-test files: the package (or
// every package under it, for a prefix ending in "/") must not import any of the packages
// (or trees, for a "/" suffix) listed. "*" forbids every package of pkg/ but those in allow.
var pkgRules = []struct {
	from   string
	forbid []string
	allow  []string
	why    string
}{
	{"pkg/record", []string{"*"}, nil, "the record is the bottom of pkg/"},
	{"pkg/report", []string{"*"}, []string{"pkg/record"}, "the statistics read records only"},
	{"pkg/wire", []string{"*"}, nil, "the header names and the usage check are neutral"},
	{"pkg/fleet", []string{"pkg/agent", "pkg/report"}, nil, "the pool is under the model client and knows no statistics"},
	{"pkg/runner", []string{"pkg/rundir"}, nil, "the run directory is the CLI's, never the runner's"},
	{"pkg/agent", []string{"pkg/servers", "pkg/servers/"}, nil, "the agent knows no built-in server"},
	{"pkg/servers", []string{"pkg/agent"}, nil, "a resource server is not a model client"},
	{"pkg/servers/", []string{"pkg/agent"}, nil, "a resource server is not a model client"},
}

// notLinked are modules a tree's non-test files must not link, even through other packages.
var notLinked = []struct {
	tree, dep, why string
}{
	{"pkg/servers", "github.com/sashabaranov/go-openai", "a resource server never links the model client's library"},
}

// rel is path relative to the module ("" for the module's root, "-" outside it).
func rel(path string) string {
	if path == module {
		return ""
	}
	if r, ok := strings.CutPrefix(path, module+"/"); ok {
		return r
	}
	return "-"
}

// layer is the top directory of a package of the module: internal, pkg, bench, cmd, test,
// examples ("" for others).
func layer(r string) string {
	top, _, _ := strings.Cut(r, "/")
	switch top {
	case "internal", "pkg", "bench", "cmd", "test", "examples":
		return top
	}
	return ""
}

// under is whether r is tree or a package below it.
func under(r, tree string) bool { return r == tree || strings.HasPrefix(r, tree+"/") }

// forbiddenLayers are the layers each layer must not import, in any file (tests included).
var forbiddenLayers = map[string][]string{
	"internal": {"pkg", "bench", "cmd", "test", "examples"},
	"pkg":      {"bench", "cmd", "test", "examples"},
	"bench":    {"cmd", "test", "examples"},
	"cmd":      {"test", "examples"},
	"test":     {"examples"},
	"examples": {"internal", "bench", "cmd", "test"},
}

// layerWhy says why a layer may not import another.
var layerWhy = map[string]string{
	"internal": "internal/ is the bottom layer: it imports nothing from pkg/, bench/, cmd/, test/",
	"pkg":      "pkg/ is the library: it imports only pkg/ and internal/",
	"bench":    "bench/ (the benchmark harnesses) imports pkg/ and internal/ only",
	"cmd":      "a command imports pkg/, internal/ and (rollout-bench) bench/",
	"test":     "the test suites import anything but the examples",
	"examples": "an example uses the library as another module would: pkg/ only",
}

// violations are the broken rules of pkgs, one line each.
func violations(pkgs []goPackage) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	for _, p := range pkgs {
		from := rel(p.ImportPath)
		if from == "-" {
			continue
		}
		fromLayer := layer(from)
		if slices.Contains(p.Imports, "testing") && !fixtures[from] {
			bad("%s imports \"testing\" in a non-test file: only a test fixture does (add it to the fixtures of docs/ARCHITECTURE.md and of this test)", from)
		}
		if p.Name == "main" {
			for _, d := range p.Deps {
				if d == "testing" || fixtures[rel(d)] {
					bad("command %s links %s: a command links no test code", from, d)
				}
			}
		}
		files := []struct {
			imports []string
			test    bool
		}{{p.Imports, false}, {p.TestImports, true}, {p.XTestImports, true}}
		for _, f := range files {
			for _, imp := range f.imports {
				to := rel(imp)
				if to == "-" || to == from {
					continue
				}
				toLayer := layer(to)
				if slices.Contains(forbiddenLayers[fromLayer], toLayer) {
					bad("%s imports %s: %s", from, to, layerWhy[fromLayer])
				}
				if toLayer == "bench" && fromLayer == "cmd" && !under(from, "cmd/rollout-bench") {
					bad("%s imports %s: only cmd/rollout-bench and the test suites import bench/", from, to)
				}
				if !f.test && fixtures[to] && !fixtures[from] {
					bad("%s imports the test fixture %s in a non-test file: fixtures are for tests", from, to)
				}
				if !f.test && fromLayer == "pkg" && toLayer == "pkg" {
					for _, r := range pkgRules {
						if !(from == r.from || strings.HasSuffix(r.from, "/") && strings.HasPrefix(from, r.from)) {
							continue
						}
						hit := false
						for _, fb := range r.forbid {
							hit = hit || fb == "*" || fb == to || strings.HasSuffix(fb, "/") && strings.HasPrefix(to, fb)
						}
						if hit && !slices.Contains(r.allow, to) {
							bad("%s imports %s: %s", from, to, r.why)
						}
					}
				}
			}
		}
		for _, n := range notLinked {
			if under(from, n.tree) && slices.Contains(p.Deps, n.dep) {
				bad("%s links %s: %s", from, n.dep, n.why)
			}
		}
	}
	return out
}

// goList is `go list -json` of every package of the module.
func goList(t *testing.T) []goPackage {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goTool, "list", "-json=ImportPath,Name,Imports,Deps,TestImports,XTestImports", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; want the module's", len(pkgs))
	}
	return pkgs
}

// TestImportRules checks every package of the module against the rules of
// docs/ARCHITECTURE.md ("Layers and import rules").
func TestImportRules(t *testing.T) {
	for _, v := range violations(goList(t)) {
		t.Error(v)
	}
}

// TestImportRulesCatch gives the rules a module with one wrong import of each kind, and a
// right one of each, and wants exactly the wrong ones named.
func TestImportRulesCatch(t *testing.T) {
	m := func(r string) string { return module + "/" + r }
	pkgs := []goPackage{
		{ImportPath: m("internal/lines"), Imports: []string{"bufio", m("pkg/record")}},
		{ImportPath: m("internal/jsonfast"), TestImports: []string{m("internal/benchutil")}, XTestImports: []string{m("pkg/dataset")}},
		{ImportPath: m("pkg/record"), Imports: []string{m("internal/durable"), m("pkg/report")}},
		{ImportPath: m("pkg/report"), Imports: []string{m("pkg/record"), m("bench/loadbench")}},
		{ImportPath: m("pkg/fleet"), Imports: []string{m("pkg/record"), m("pkg/agent")}, TestImports: []string{m("pkg/agent"), m("internal/testnet")}},
		{ImportPath: m("pkg/servers/workflow"), Imports: []string{m("pkg/plan")}, Deps: []string{"github.com/sashabaranov/go-openai"}},
		{ImportPath: m("pkg/view"), Imports: []string{m("pkg/record/recordtest")}},
		{ImportPath: m("pkg/servers/gym/gymtest"), Imports: []string{"testing", m("internal/redistest")}},
		{ImportPath: m("pkg/claim"), Imports: []string{"testing"}},
		{ImportPath: m("cmd/rollout"), Name: "main", Imports: []string{m("pkg/runner"), m("bench/fleetbench")}, Deps: []string{"testing"}},
		{ImportPath: m("cmd/rollout-bench"), Name: "main", Imports: []string{m("bench/fleetbench")}},
		{ImportPath: m("examples/cart"), Imports: []string{m("pkg/servers/gym"), m("internal/jsonfast")}},
		{ImportPath: m("test/soak"), XTestImports: []string{m("pkg/rundir"), m("bench/loadbench"), m("internal/redistest")}},
	}
	want := []string{
		"internal/lines imports pkg/record: internal/ is the bottom layer",
		"internal/jsonfast imports pkg/dataset: internal/ is the bottom layer",
		"pkg/record imports pkg/report: the record is the bottom of pkg/",
		"pkg/report imports bench/loadbench: pkg/ is the library",
		"pkg/fleet imports pkg/agent: the pool is under the model client",
		"pkg/servers/workflow links github.com/sashabaranov/go-openai",
		"pkg/view imports the test fixture pkg/record/recordtest in a non-test file",
		"pkg/claim imports \"testing\" in a non-test file",
		"command cmd/rollout links testing",
		"cmd/rollout imports bench/fleetbench: only cmd/rollout-bench",
		"examples/cart imports internal/jsonfast: an example uses the library",
	}
	got := violations(pkgs)
	for _, w := range want {
		n := 0
		for _, g := range got {
			if strings.HasPrefix(g, w) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d violations start with %q; want 1", n, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d violations, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
}
