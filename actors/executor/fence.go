package executor

import "time"

// epochFence is an executor's fence: the newest activation epoch it has
// seen from each grain. A grain's activation bumps its epoch in the store
// (oplog.Owner.TakeLease), so a command from an older epoch comes from an activation
// that has been replaced (a restart, a move, a grain that re-activated
// after a panic): the executor refuses it rather than run or cancel work on
// a state the grain no longer holds. Its owner serialises access.
type epochFence map[string]fenceEntry

type fenceEntry struct {
	epoch uint64
	seen  time.Time
}

// fenceKeep is how long a grain's entry outlives its last command once the
// fence is large: a replaced activation sends its last commands within
// moments of being replaced, not an hour later.
const fenceKeep = time.Hour

// fenceLarge is the number of entries past which old ones are dropped.
const fenceLarge = 4096

// admit records epoch for grain id and reports whether it is current: not
// older than the newest seen.
func (f epochFence) admit(id string, epoch uint64) bool {
	now := time.Now()
	if e, ok := f[id]; ok && epoch < e.epoch {
		return false
	}
	if len(f) >= fenceLarge {
		for k, e := range f {
			if now.Sub(e.seen) > fenceKeep {
				delete(f, k)
			}
		}
	}
	f[id] = fenceEntry{epoch, now}
	return true
}

// current is the newest epoch seen from grain id.
func (f epochFence) current(id string) uint64 { return f[id].epoch }
