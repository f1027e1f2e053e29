package actors

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var tables = map[string]map[string][]string{
	"session": SessionMoves, "run": RunMoves, "operation": OpMoves, "sampler": SamplerMoves,
	"checkpoint and artifact": OutputMoves, "export": ExportMoves, "usage settlement": SettlementMoves,
}

// TestIllegalMovesRefused tries every pair of statuses of every table:
// move takes exactly the listed ones and refuses each other one, leaving
// the status as it was.
func TestIllegalMovesRefused(t *testing.T) {
	for name, table := range tables {
		for from, allowed := range table {
			for to := range table {
				status := from
				err := move(table, &status, to)
				switch legal := slices.Contains(allowed, to); {
				case legal && (err != nil || status != to):
					t.Errorf("%s: %s -> %s is in the table but refused: %v", name, from, to, err)
				case !legal && (!errors.Is(err, errIllegalMove) || status != from):
					t.Errorf("%s: %s -> %s is not in the table but moved (err %v, status %s)", name, from, to, err, status)
				}
			}
			for _, to := range allowed {
				if _, ok := table[to]; !ok {
					t.Errorf("%s: %s -> %s leads to a status the table lacks", name, from, to)
				}
			}
		}
	}
}

// TestStatusesMoveByTable reads the package's source: outside states.go no
// statement assigns a status field, so every change after a record's
// creation goes through move and its table.
func TestStatusesMoveByTable(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "states.go" {
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
