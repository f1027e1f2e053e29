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

// takeIf takes the accepted items in turn order up to its limit, and the
// rest keep their order and turns.
func TestFairQueueTakeIf(t *testing.T) {
	var q fairQueue[string]
	for _, v := range []string{"a0", "a1", "a2"} {
		q.push("a", v)
	}
	q.push("b", "b0")
	q.push("c", "c0")
	q.push("c", "c1")
	got := q.takeIf(3, func(v string) bool { return v != "a1" && v != "c0" })
	if fmt.Sprint(got) != "[a0 a2 b0]" || q.len() != 3 {
		t.Fatalf("took %v (left %d)", got, q.len())
	}
	var rest []string
	for {
		v, ok := q.pop()
		if !ok {
			break
		}
		rest = append(rest, v)
	}
	if fmt.Sprint(rest) != "[a1 c0 c1]" {
		t.Fatalf("left %v", rest)
	}
}
