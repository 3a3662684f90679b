package lint

import (
	"go/ast"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// keyOwners names, for each first byte of a store key, the package that
// owns the keys starting with it (docs/design.md, "Store layout"). Only the
// owner may build or scan those keys; other packages go through its API.
var keyOwners = map[byte]string{
	'l': "cowfs", 'L': "cowfs", 'c': "cowfs", 'M': "cowfs", 'X': "cowfs",
	'B': "branches", 'N': "branches", 'K': "branches", 'S': "branches", 'I': "branches", 'A': "branches",
}

// TestKeyOwnership fails if a package other than a key prefix's owner
// writes a byte slice literal starting with that prefix ([]byte{'L'}, say):
// that is how a package reads or writes another package's keys.
func TestKeyOwnership(t *testing.T) {
	for _, dir := range []string{"kv", "cowfs", "branches", "nfsserver", "nfsserver/control", "cmd/branchnfs"} {
		fset := token.NewFileSet()
		for _, f := range parseDir(t, fset, filepath.Join("..", "..", dir)) {
			ast.Inspect(f, func(n ast.Node) bool {
				cl, ok := n.(*ast.CompositeLit)
				if !ok || len(cl.Elts) == 0 || !isByteSlice(cl.Type) {
					return true
				}
				lit, ok := cl.Elts[0].(*ast.BasicLit)
				if !ok || lit.Kind != token.CHAR {
					return true
				}
				c, _, _, err := strconv.UnquoteChar(strings.Trim(lit.Value, "'"), '\'')
				if err != nil || c > 0x7f {
					return true
				}
				if owner, ok := keyOwners[byte(c)]; ok && owner != dir {
					t.Errorf("%s: %s builds a key with prefix %s, which %s owns: use %s's API",
						fset.Position(cl.Pos()), dir, lit.Value, owner, owner)
				}
				return true
			})
		}
	}
}

func isByteSlice(e ast.Expr) bool {
	at, ok := e.(*ast.ArrayType)
	if !ok || at.Len != nil {
		return false
	}
	id, ok := at.Elt.(*ast.Ident)
	return ok && id.Name == "byte"
}
