package cowfs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestBlockRefsGoThroughRefLog: no code of the package writes a
// block-reference key (dataKey) with a plain Set: refLog.set is the one
// way, so that a concurrent block sweep learns of every reference.
func TestBlockRefsGoThroughRefLog(t *testing.T) {
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Set" {
				return true
			}
			if recv, ok := sel.X.(*ast.Ident); ok && recv.Name == "r" {
				return true // refLog.set's own Set
			}
			if arg, ok := call.Args[0].(*ast.CallExpr); ok {
				if fn, ok := arg.Fun.(*ast.Ident); ok && fn.Name == "dataKey" {
					t.Errorf("%s: a block reference is written with Set: use refLog.set", fset.Position(call.Pos()))
				}
			}
			return true
		})
	}
}
