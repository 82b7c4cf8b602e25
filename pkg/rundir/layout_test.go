package rundir

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Only this package builds the path of a run's file: outside it, no Go file (tests aside)
// holds a run file's name as a string of its own ("summary.json", "out/summary.json"), nor
// joins one of this package's file-name constants into a path (filepath.Join, path.Join,
// +). Help and messages may name the files in their text.
func TestOnlyRundirBuildsRunPaths(t *testing.T) {
	names := append(slices.Clone(runFiles), LockFile)
	consts := fileConstants(t, names)
	if len(consts) < len(names)-1 { // ParquetFile + ".tmp" has no constant of its own
		t.Fatalf("file-name constants found: %v, for the files %v", consts, names)
	}
	root := filepath.Join("..", "..")
	self, _ := filepath.Abs(".")
	var problems []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			abs, _ := filepath.Abs(path)
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor" || abs == self) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		problems = append(problems, runPathsIn(t, path, names, consts)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// fileConstants are the names of this package's constants whose value is one of names.
func fileConstants(t *testing.T, names []string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]bool{}
	for _, pkg := range pkgs {
		ast.Inspect(pkg, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, v := range vs.Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING && i < len(vs.Names) {
					if s, err := strconv.Unquote(lit.Value); err == nil && slices.Contains(names, s) && vs.Names[i].IsExported() {
						consts[vs.Names[i].Name] = true
					}
				}
			}
			return true
		})
	}
	return consts
}

// runPathsIn lists the places in the Go file at path that build the path of a run's file.
func runPathsIn(t *testing.T, path string, names []string, consts map[string]bool) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	local := "" // the name this file imports the package by
	for _, im := range f.Imports {
		if p, _ := strconv.Unquote(im.Path.Value); strings.HasSuffix(p, "/pkg/rundir") {
			local = "rundir"
			if im.Name != nil {
				local = im.Name.Name
			}
		}
	}
	isConst := func(e ast.Expr) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok || local == "" {
			return false
		}
		id, ok := sel.X.(*ast.Ident)
		return ok && id.Name == local && consts[sel.Sel.Name]
	}
	var problems []string
	report := func(n ast.Node, what string) {
		problems = append(problems, fset.Position(n.Pos()).String()+": "+what)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(n.Value)
			if err != nil {
				return true
			}
			for _, name := range names {
				if s == name || strings.HasSuffix(s, "/"+name) {
					report(n, "the run file name "+strconv.Quote(name)+": read the run through package rundir")
				}
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Join" {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || (pkg.Name != "filepath" && pkg.Name != "path") {
				return true
			}
			for _, a := range n.Args {
				if isConst(a) {
					report(a, "a path joined with rundir's file-name constant: read the run through package rundir")
				}
			}
		case *ast.BinaryExpr:
			if n.Op == token.ADD && (isConst(n.X) || isConst(n.Y)) {
				report(n, "a path made with rundir's file-name constant: read the run through package rundir")
			}
		}
		return true
	})
	return problems
}
