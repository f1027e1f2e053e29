package etcdstore

import (
	"errors"
	"fmt"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
)

// ServerConfig is one voter of the cluster's etcd, embedded in a node.
type ServerConfig struct {
	Name   string // the member's name, the same at every restart
	Dir    string // its data (the node's own disk)
	Peer   string // host:port the other voters reach it at (raft)
	Client string // host:port clients reach it at
	// Listen is the local host its ports listen on ("": Peer's and
	// Client's hosts), when others reach it through an address mapped to
	// it.
	Listen string
	// Join lists client addresses (host:port) of the running cluster to
	// join as a new voter; none starts a new cluster of one. A member
	// with data in Dir restarts as what it was, whatever Join says.
	Join []string
	Log  *slog.Logger
}

// Server is an embedded etcd voter and a client of it.
type Server struct {
	etcd   *embed.Etcd
	Client *clientv3.Client // in process: no network between the node and its voter
	URL    string           // the client address others use
	closed sync.Once
}

// startTimeout bounds how long a voter waits to be ready: to elect a
// leader, or to catch up with the cluster it joins.
const startTimeout = 60 * time.Second

// Serve starts the voter and waits until it serves.
func Serve(cfg ServerConfig) (*Server, error) {
	ec := embed.NewConfig()
	ec.Name, ec.Dir = cfg.Name, cfg.Dir
	peer, err := url.Parse("http://" + cfg.Peer)
	if err != nil {
		return nil, fmt.Errorf("etcd peer address %q: %w", cfg.Peer, err)
	}
	client, err := url.Parse("http://" + cfg.Client)
	if err != nil {
		return nil, fmt.Errorf("etcd client address %q: %w", cfg.Client, err)
	}
	listen := func(u *url.URL) url.URL {
		l := *u
		if cfg.Listen != "" {
			l.Host = net.JoinHostPort(cfg.Listen, u.Port())
		}
		return l
	}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{listen(peer)}, []url.URL{*peer}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{listen(client)}, []url.URL{*client}
	ec.InitialCluster = cfg.Name + "=" + peer.String()
	ec.ClusterState = embed.ClusterStateFlagNew
	ec.MaxTxnOps = 2 * maxTxnOps
	// Records are small (BlobAbove) and history is never read: keep the
	// last 10,000 revisions, which outlast any View.
	ec.AutoCompactionMode, ec.AutoCompactionRetention = "revision", "10000"
	ec.LogLevel, ec.LogOutputs = "warn", []string{filepath.Join(cfg.Dir, "etcd.log")}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcd data folder: %w", err)
	}
	restart := HasData(cfg.Dir)
	var learner *joining
	if !restart && len(cfg.Join) > 0 {
		if learner, err = addLearner(cfg, peer.String()); err != nil {
			return nil, err
		}
		defer learner.cli.Close()
		ec.InitialCluster, ec.ClusterState = learner.initial, embed.ClusterStateFlagExisting
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("start etcd %s: %w", cfg.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd %s: %w", cfg.Name, err)
	case <-time.After(startTimeout):
		e.Close()
		return nil, fmt.Errorf("etcd %s: not ready after %v", cfg.Name, startTimeout)
	}
	if learner != nil {
		if err := learner.promote(); err != nil {
			e.Close()
			return nil, fmt.Errorf("etcd %s: %w", cfg.Name, err)
		}
	}
	if cfg.Log != nil {
		cfg.Log.Info("etcd voter serving", "name", cfg.Name, "client", cfg.Client, "peer", cfg.Peer, "restart", restart, "joined", cfg.Join)
	}
	return &Server{etcd: e, Client: v3client.New(e.Server), URL: cfg.Client}, nil
}

// HasData says whether dir holds a voter's data from before: its node was
// a voter, and restarts as one.
func HasData(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "member"))
	return err == nil
}

// joining is a voter on its way into a running cluster: added as a
// learner, which the quorum does not count until it has caught up, so the
// cluster keeps its quorum meanwhile (a voter added outright counts at
// once, and until it runs the others wait on it).
type joining struct {
	cli     *clientv3.Client // to the running cluster
	id      uint64
	initial string // the initial-cluster list the member starts with
}

// addLearner adds this member to the running cluster as a learner.
func addLearner(cfg ServerConfig, peerURL string) (*joining, error) {
	cli, err := Dial(cfg.Join)
	if err != nil {
		return nil, err
	}
	var resp *clientv3.MemberAddResponse
	err = retryWhile(joinable, startTimeout, func() error {
		c, cancel := ctx()
		defer cancel()
		resp, err = cli.MemberAddAsLearner(c, []string{peerURL})
		return err
	})
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("add etcd member %s through %v: %w", cfg.Name, cfg.Join, err)
	}
	var list []string
	for _, m := range resp.Members {
		name := m.Name
		if m.ID == resp.Member.ID {
			name = cfg.Name
		}
		for _, u := range m.PeerURLs {
			list = append(list, name+"="+u)
		}
	}
	return &joining{cli: cli, id: resp.Member.ID, initial: strings.Join(list, ",")}, nil
}

// promote makes the learner a voter once it has caught up.
func (j *joining) promote() error {
	err := retryWhile(joinable, startTimeout, func() error {
		c, cancel := ctx()
		defer cancel()
		_, err := j.cli.MemberPromote(c, j.id)
		return err
	})
	if err != nil {
		return fmt.Errorf("promote to voter: %w", err)
	}
	return nil
}

// Members counts the members of the etcd cluster whose voters serve
// clients at addrs (learners included: each is on its way to a vote).
func Members(addrs []string) (int, error) {
	cli, err := Dial(addrs)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	members, err := memberList(cli)
	if err != nil {
		return 0, fmt.Errorf("through %v: %w", addrs, err)
	}
	return len(members), nil
}

// Voter is one member of the store's etcd cluster.
type Voter struct {
	Name    string   `json:"name"`
	Peers   []string `json:"peer_urls"`
	Clients []string `json:"client_urls"`
	Learner bool     `json:"learner"` // not voting yet: catching up
}

// Voters lists the members of the etcd cluster whose voters serve clients
// at addrs.
func Voters(addrs []string) ([]Voter, error) {
	cli, err := Dial(addrs)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	members, err := memberList(cli)
	if err != nil {
		return nil, err
	}
	out := make([]Voter, 0, len(members))
	for _, m := range members {
		out = append(out, Voter{Name: m.Name, Peers: m.PeerURLs, Clients: m.ClientURLs, Learner: m.IsLearner})
	}
	return out, nil
}

// RemoveVoter removes the voter named name from the store's etcd cluster
// for good (its machine is gone): the others then count their quorum
// without it. etcd refuses a removal that would cost the quorum. A node
// whose voter was removed must not start again with its old data.
func RemoveVoter(addrs []string, name string) error {
	cli, err := Dial(addrs)
	if err != nil {
		return err
	}
	defer cli.Close()
	members, err := memberList(cli)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(members, func(m *etcdserverpb.Member) bool { return m.Name == name })
	if i < 0 {
		return fmt.Errorf("no voter named %q", name)
	}
	c, cancel := ctx()
	defer cancel()
	if _, err := cli.MemberRemove(c, members[i].ID); err != nil {
		return fmt.Errorf("remove voter %s: %w", name, err)
	}
	return nil
}

func memberList(cli *clientv3.Client) ([]*etcdserverpb.Member, error) {
	var resp *clientv3.MemberListResponse
	err := again(func() (err error) {
		c, cancel := ctx()
		defer cancel()
		resp, err = cli.MemberList(c)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("etcd members: %w", err)
	}
	return resp.Members, nil
}

// Dial connects a client to the cluster's voters at the given client
// addresses (host:port).
func Dial(addrs []string) (*clientv3.Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("etcd: no address to dial")
	}
	eps := make([]string, len(addrs))
	for i, a := range addrs {
		eps[i] = "http://" + a
	}
	// The client's own log would repeat, in JSON, the errors its calls
	// return to us.
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		AutoSyncInterval: 30 * time.Second}) // voters that join later are found
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", addrs, err)
	}
	return cli, nil
}

// Close stops the voter (its client first).
func (s *Server) Close() {
	s.closed.Do(func() {
		s.Client.Close()
		s.etcd.Close()
	})
}
