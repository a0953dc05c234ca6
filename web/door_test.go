package web

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestWebChangesOnlyThroughWorkflow holds the rule in workflow's package
// comment: web reads through store and changes anything only through
// workflow, and holds no payment processor. It reads the source: a store
// method writes when it starts a write transaction (db.begin), touches the
// writer connection or its prepared statements, or calls a store function
// that does; web's code may call none of them (Ping, the health probe of
// both connections, changes nothing), and may not import billing.
func TestWebChangesOnlyThroughWorkflow(t *testing.T) {
	writes := storeWriters(t)
	if len(writes) < 50 || !writes["CreateOffer"] || writes["FindOfferByID"] {
		t.Fatalf("the store's writers were not found (%d, CreateOffer %v, FindOfferByID %v): the check is broken",
			len(writes), writes["CreateOffer"], writes["FindOfferByID"])
	}
	var bad []string
	for _, f := range parseDir(t, ".") {
		for _, imp := range f.file.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/gpumarket/gpumarket/billing" {
				bad = append(bad, f.name+": imports billing (the processor is workflow's)")
			}
		}
		ast.Inspect(f.file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || !writes[sel.Sel.Name] || !isStoreValue(sel.X) || sel.Sel.Name == "Ping" {
				return true
			}
			bad = append(bad, f.fset.Position(sel.Pos()).String()+": calls store."+sel.Sel.Name+", a write: go through workflow")
			return true
		})
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

// isStoreValue reports whether x names web's store: the handler's db field
// (h.db, a.db…) or New's db parameter.
func isStoreValue(x ast.Expr) bool {
	switch x := x.(type) {
	case *ast.Ident:
		return x.Name == "db"
	case *ast.SelectorExpr:
		return x.Sel.Name == "db"
	}
	return false
}

type parsedFile struct {
	name string
	fset *token.FileSet
	file *ast.File
}

// parseDir parses the non-test Go files of a directory.
func parseDir(t *testing.T, dir string) []parsedFile {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []parsedFile
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, parsedFile{name: name, fset: fset, file: f})
	}
	return out
}

// storeWriters names the store's functions and methods that write: those
// that begin a write transaction or use the writer connection or its
// statements, and, transitively, those that call one of them by name (a
// plain call, or a method of the DB they were given).
func storeWriters(t *testing.T) map[string]bool {
	t.Helper()
	calls := map[string]map[string]bool{} // function name → names it calls
	writes := map[string]bool{}
	for _, f := range parseDir(t, filepath.Join("..", "store")) {
		for _, d := range f.file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			name := fn.Name.Name
			if calls[name] == nil {
				calls[name] = map[string]bool{}
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.SelectorExpr:
					if !isStoreValue(n.X) && !isReceiver(n.X, fn) {
						return true
					}
					switch n.Sel.Name {
					case "begin", "writer", "stmts":
						writes[name] = true
					}
					calls[name][n.Sel.Name] = true
				case *ast.CallExpr:
					if id, ok := n.Fun.(*ast.Ident); ok {
						calls[name][id.Name] = true
					}
				}
				return true
			})
		}
	}
	for changed := true; changed; {
		changed = false
		for name, callees := range calls {
			if writes[name] {
				continue
			}
			for c := range callees {
				if writes[c] {
					writes[name], changed = true, true
					break
				}
			}
		}
	}
	return writes
}

// isReceiver reports whether x is fn's receiver.
func isReceiver(x ast.Expr, fn *ast.FuncDecl) bool {
	id, ok := x.(*ast.Ident)
	if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 || len(fn.Recv.List[0].Names) == 0 {
		return false
	}
	return fn.Recv.List[0].Names[0].Name == id.Name
}
