package states

import (
	"errors"
	"slices"
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
				err := Move(table, &status, to)
				switch legal := slices.Contains(allowed, to); {
				case legal && (err != nil || status != to):
					t.Errorf("%s: %s -> %s is in the table but refused: %v", name, from, to, err)
				case !legal && (!errors.Is(err, ErrIllegalMove) || status != from):
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
