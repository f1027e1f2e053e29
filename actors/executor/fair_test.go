package executor

import (
	"fmt"
	"testing"
)

// One organization's backlog does not delay another's work: turns
// alternate between organizations, oldest first within each.
func TestFairQueueTakesTurns(t *testing.T) {
	var q fairQueue[string]
	for i := range 5 {
		q.push("big", fmt.Sprint("b", i))
	}
	q.push("small", "s0")
	q.push("other", "o0")
	q.push("small", "s1")
	var got []string
	for {
		v, ok := q.pop()
		if !ok {
			break
		}
		got = append(got, v)
		if v == "b0" {
			q.push("big", "b0-again") // a sliced task goes to the back of its line
		}
	}
	want := "[b0 s0 o0 b1 s1 b2 b3 b4 b0-again]"
	if fmt.Sprint(got) != want || q.len() != 0 {
		t.Fatalf("order %v, want %s (left %d)", got, want, q.len())
	}
}
