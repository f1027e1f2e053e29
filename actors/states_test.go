package actors_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestStatusesMoveByTable reads the source of the node and of every
// package under it (the grains, the executors, artifacts, usage): no
// statement assigns a status field, so every change after a record's
// creation goes through states.Move and its table.
func TestStatusesMoveByTable(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	under, err := filepath.Glob("*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, under...)
	if len(under) < 20 {
		t.Fatalf("found %d files under the node's packages; the scan would prove nothing", len(under))
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			as, ok := n.(*ast.AssignStmt)
			if !ok {
				return true
			}
			for _, lhs := range as.Lhs {
				if sel, ok := lhs.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Status" || sel.Sel.Name == "SettlementStatus") {
					t.Errorf("%s: a status is assigned directly, not through its table's move", fset.Position(as.Pos()))
				}
			}
			return true
		})
	}
}
