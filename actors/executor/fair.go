package executor

// fairQueue holds work by organization and hands it out in turns: each
// organization with work gets the next item in its turn, oldest first, so
// that no tenant waits behind another's backlog, however long. A task that
// is not done after its slice goes back to the end of its organization's
// line, so an organization's runs take turns too.
type fairQueue[T any] struct {
	by   map[string][]T
	ring []string // organizations with work, in turn order
	n    int
}

func (q *fairQueue[T]) push(org string, v T) {
	if q.by == nil {
		q.by = map[string][]T{}
	}
	if len(q.by[org]) == 0 {
		q.ring = append(q.ring, org)
	}
	q.by[org] = append(q.by[org], v)
	q.n++
}

// pop takes the next organization's oldest item; the organization goes to
// the back of the turn order.
func (q *fairQueue[T]) pop() (T, bool) {
	var zero T
	if len(q.ring) == 0 {
		return zero, false
	}
	org := q.ring[0]
	q.ring = q.ring[1:]
	items := q.by[org]
	v := items[0]
	items[0] = zero
	if items = items[1:]; len(items) > 0 {
		q.by[org] = items
		q.ring = append(q.ring, org)
	} else {
		delete(q.by, org)
	}
	q.n--
	return v, true
}

// peek is the item pop would return, without taking it.
func (q *fairQueue[T]) peek() (T, bool) {
	var zero T
	if len(q.ring) == 0 {
		return zero, false
	}
	return q.by[q.ring[0]][0], true
}

func (q *fairQueue[T]) len() int { return q.n }

// takeIf removes and returns the items that ok accepts, in turn order
// (each organization's items oldest first), until ok has accepted n; the
// items left keep their order and the organizations their turns.
func (q *fairQueue[T]) takeIf(n int, ok func(T) bool) []T {
	var out []T
	ring := q.ring[:0]
	for _, org := range q.ring {
		items := q.by[org]
		kept := items[:0]
		for _, v := range items {
			if len(out) < n && ok(v) {
				out = append(out, v)
				continue
			}
			kept = append(kept, v)
		}
		clear(items[len(kept):]) // drop the references to the items taken
		if len(kept) == 0 {
			delete(q.by, org)
			continue
		}
		q.by[org] = kept
		ring = append(ring, org)
	}
	q.ring = ring
	q.n -= len(out)
	return out
}
