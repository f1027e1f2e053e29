package etcdstore

// cache holds records this node read or wrote, with their modification
// revisions, so that a grain's writer does not read its own records back
// from etcd in every transaction: a stale one costs a conflict and a run
// again, never a wrong write, since the commit checks every revision
// read. Only the commit loop uses it. Views never do: they must see what
// other nodes wrote.
type cache struct {
	m     map[string]entry
	bytes int
}

// cacheBytes bounds the cache: past it, it starts again empty.
const cacheBytes = 64 << 20

// init empties the cache.
func (c *cache) init() { c.m, c.bytes = map[string]entry{}, 0 }

func (c *cache) get(k string) (entry, bool) {
	e, ok := c.m[k]
	return e, ok
}

func (c *cache) put(k string, raw []byte, mod int64) {
	if old, ok := c.m[k]; ok {
		c.bytes -= len(k) + len(old.raw)
	}
	if c.bytes+len(k)+len(raw) > cacheBytes {
		c.init()
	}
	c.m[k] = entry{raw: raw, mod: mod}
	c.bytes += len(k) + len(raw)
}

func (c *cache) drop(k string) {
	if old, ok := c.m[k]; ok {
		c.bytes -= len(k) + len(old.raw)
		delete(c.m, k)
	}
}
