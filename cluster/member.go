package cluster

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/wts-project/wts/persistence/etcdstore"
)

// MemberConfig is a node of a cluster, before its actor system starts.
type MemberConfig struct {
	// Name names the node for good: its folder and its etcd member keep it
	// across restarts.
	Name string
	// Advertise is HOST:PORT where the others reach this node's gossip;
	// the node also takes the three ports after it: PORT+1 its actor
	// remote, PORT+2 and PORT+3 its etcd voter's clients and peers.
	Advertise string
	// Bind is the local host the four ports listen on ("": the advertised
	// host), for a node that others reach through NAT or a container's
	// port mapping.
	Bind    string
	Join    []string // gossip addresses of members (none: a new cluster)
	Dir     string   // the node's own folder (its etcd voter's data)
	BlobDir string   // on the shared volume: the store's large records
	// Voters is how many nodes serve the store (etcd voters): the first
	// ones to join; the others are its clients.
	Voters   int
	Capacity Capacity
	Log      *slog.Logger
}

// Member is this node's part in the cluster before its actors start: its
// gossip, the store every node shares, and the etcd voter it may serve.
type Member struct {
	Gossip     *Gossip
	Store      *etcdstore.Store
	RemoteHost string // where its actor remote is reached
	RemotePort int
	RemoteBind string            // the host it listens on
	server     *etcdstore.Server // nil when the node is a client of the store
	client     *clientv3.Client  // the store's
}

// collectEvery is how often each voter removes the blob files no record
// refers to (etcdstore.CollectBlobs).
const collectEvery = time.Hour

// Join gossips with the cluster (or starts one) and opens the shared
// store: as one of its etcd voters while fewer than cfg.Voters serve it
// (or when this node's folder holds a voter's data from before), or as a
// client of those that do.
func Join(cfg MemberConfig) (_ *Member, err error) {
	host, port, err := splitHostPort(cfg.Advertise)
	if err != nil || port == 0 {
		return nil, fmt.Errorf("--advertise %q: want HOST:PORT with a port", cfg.Advertise)
	}
	bind := cmp.Or(cfg.Bind, host)
	at := func(h string, p int) string { return net.JoinHostPort(h, strconv.Itoa(p)) }
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	g := NewGossip(GossipConfig{Bind: at(bind, port), Advertise: cfg.Advertise, Join: cfg.Join, Capacity: cfg.Capacity, Log: log})
	if err := g.Open(cfg.Name); err != nil {
		return nil, err
	}
	m := &Member{Gossip: g, RemoteHost: host, RemotePort: port + 1, RemoteBind: bind}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	var voters []string
	for _, n := range g.Nodes() {
		if n.Store != "" {
			voters = append(voters, n.Store)
		}
	}
	dir := filepath.Join(cfg.Dir, "etcd")
	if len(cfg.Join) > 0 && len(voters) == 0 && !etcdstore.HasData(dir) {
		return nil, fmt.Errorf("join %v: no member serves the store yet", cfg.Join)
	}
	voter := etcdstore.HasData(dir) || len(voters) == 0
	if !voter {
		// The store's own member list, not the voters gossip finds alive:
		// a voter that is down is still one.
		n, err := etcdstore.Members(voters)
		if err != nil {
			return nil, err
		}
		voter = n < max(cfg.Voters, 1)
	}
	if voter {
		if m.server, err = etcdstore.Serve(etcdstore.ServerConfig{Name: cfg.Name, Dir: dir, Client: at(host, port+2), Peer: at(host, port+3), Listen: bind, Join: voters, Log: log}); err != nil {
			return nil, err
		}
		m.client = m.server.Client
		if err := g.SetStore(m.server.URL); err != nil {
			return nil, err
		}
	} else if m.client, err = etcdstore.Dial(voters); err != nil {
		return nil, err
	}
	sc := etcdstore.Config{Client: m.client, Prefix: "wts/", BlobDir: cfg.BlobDir, Log: log}
	if voter {
		sc.CollectEvery = collectEvery // the voters read the records from their own copy
	}
	if m.Store, err = etcdstore.Open(sc); err != nil {
		return nil, err
	}
	log.Info("cluster member", "name", cfg.Name, "voter", voter, "voters", voters, "gossip", g.Addr())
	return m, nil
}

// Close ends gossip (without a leave: the actor system's graceful stop
// leaves first) and stops the node's etcd voter, or closes its client; the
// store must be closed before.
func (m *Member) Close() {
	_ = m.Gossip.Shutdown(false)
	switch {
	case m.server != nil:
		m.server.Close() // its client too
	case m.client != nil:
		m.client.Close()
	}
}
