package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Packages above cowfs reach its keys only through cowfs.Store, View and
// Txn: none calls a cowfs function or method that takes a raw kv.Txn,
// kv.Store or kv.Snapshot, so none hands cowfs a transaction or store of
// its own making to read or write cowfs's keys with. cowfs.Open, which
// takes the kv.Store a Store is made over, is the one exception.
var storeAPIUsers = []string{"branches", "nfsserver", "nfsserver/control", "cmd/branchnfs"}

// rawKVTypes are the kv types a cowfs API must not take from its callers.
var rawKVTypes = map[string]bool{"Txn": true, "Store": true, "Snapshot": true}

// rawKVAllowed names the cowfs functions that may take one anyway.
var rawKVAllowed = map[string]bool{"Open": true}

func TestNoRawKVIntoCowfs(t *testing.T) {
	fset := token.NewFileSet()
	cowfs := parseDir(t, fset, filepath.Join("..", "..", "cowfs"))
	funcs, methods := rawKVAPI(cowfs)
	if len(funcs)+len(methods) > 0 {
		// Not an error by itself (tests may use them), but report what
		// callers above cowfs must not use.
		t.Logf("cowfs API taking raw kv types: funcs %v, methods %v", keys(funcs), keys(methods))
	}
	for _, dir := range storeAPIUsers {
		files := parseDir(t, fset, filepath.Join("..", "..", dir))
		for _, msg := range rawKVCalls(fset, files, funcs, methods) {
			t.Errorf("%s: pass cowfs a *cowfs.Store, View or Txn instead (a Store method, Txn.KV for the caller's own keys)", msg)
		}
	}
}

// TestNoRawKVIntoCowfsCatches: the check above reports a call from branches
// to a cowfs function or method taking a kv.Txn or kv.Store.
func TestNoRawKVIntoCowfsCatches(t *testing.T) {
	fset := token.NewFileSet()
	cow, err := parser.ParseFile(fset, "cowfs.go", `package cowfs
import "github.com/branchnfs/branchnfs/kv"
type Store struct{}
type View struct{}
func Open(st kv.Store) *Store { return nil }
func PutLayer(tx kv.Txn, l uint64) error { return nil }
func (f *View) DropRaw(tx kv.Txn) error { return nil }
func (s *Store) Fine(l uint64) error { return nil }
`, 0)
	if err != nil {
		t.Fatal(err)
	}
	br, err := parser.ParseFile(fset, "branches.go", `package branches
func f(st kv.Store, tx kv.Txn, v *cowfs.View, s *cowfs.Store) {
	cowfs.Open(st)
	s.Fine(1)
	cowfs.PutLayer(tx, 1)
	v.DropRaw(tx)
}
`, 0)
	if err != nil {
		t.Fatal(err)
	}
	funcs, methods := rawKVAPI([]*ast.File{cow})
	got := rawKVCalls(fset, []*ast.File{br}, funcs, methods)
	if len(got) != 2 || !strings.Contains(got[0], "cowfs.PutLayer") || !strings.Contains(got[1], "DropRaw") {
		t.Fatalf("found %q, want the calls of cowfs.PutLayer and DropRaw", got)
	}
}

func parseDir(t *testing.T, fset *token.FileSet, dir string) []*ast.File {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return files
}

// rawKVAPI lists cowfs's exported functions and methods with a parameter
// of a raw kv type, but those rawKVAllowed names.
func rawKVAPI(files []*ast.File) (funcs, methods map[string]bool) {
	funcs, methods = map[string]bool{}, map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || !fd.Name.IsExported() || !takesRawKV(fd.Type) {
				continue
			}
			if fd.Recv == nil {
				if !rawKVAllowed[fd.Name.Name] {
					funcs[fd.Name.Name] = true
				}
			} else {
				methods[fd.Name.Name] = true
			}
		}
	}
	return funcs, methods
}

func takesRawKV(ft *ast.FuncType) bool {
	for _, p := range ft.Params.List {
		sel, ok := p.Type.(*ast.SelectorExpr)
		if !ok {
			continue
		}
		if x, ok := sel.X.(*ast.Ident); ok && x.Name == "kv" && rawKVTypes[sel.Sel.Name] {
			return true
		}
	}
	return false
}

// rawKVCalls returns a message for every call in files of a cowfs
// function in funcs (cowfs.Name(...)) or of a method named in methods that
// the files' own package does not declare.
func rawKVCalls(fset *token.FileSet, files []*ast.File, funcs, methods map[string]bool) []string {
	own := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil {
				own[fd.Name.Name] = true
			}
		}
	}
	var out []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			name := sel.Sel.Name
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "cowfs" {
				if funcs[name] {
					out = append(out, fset.Position(call.Pos()).String()+": calls cowfs."+name+", which takes a raw kv type")
				}
				return true
			}
			if methods[name] && !own[name] {
				out = append(out, fset.Position(call.Pos()).String()+": calls cowfs method "+name+", which takes a raw kv type")
			}
			return true
		})
	}
	return out
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
