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
