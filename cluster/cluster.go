// Package cluster places the service's grains (virtual actors) on members.
// Two ClusterProviders find the members: Gossip (hashicorp/memberlist), for
// nodes that join and leave, and Static, whose members are fixed when it
// starts (a single node, or tests). Callers build a cluster with Start.
package cluster

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/wts-project/wts/persistence"
	"google.golang.org/grpc"
)

// MaxMessage bounds one remote message. gRPC's default 4 MiB applies to a
// whole batch and a breach shows only as a request timeout; 64 MiB holds the
// largest request body the API accepts with room to spare.
const MaxMessage = 64 << 20

// Config is a member's configuration.
type Config struct {
	Name           string        // cluster name
	Host           string        // address the remote listens on
	Port           int           // 0: any free port
	RequestTimeout time.Duration // one grain request, before protoactor retries
	// Advertise is HOST:PORT where the other members reach the remote
	// ("": Host and Port), when they reach it through a mapped address.
	Advertise string
	// Gossip, when set, finds the members; otherwise Peers are the other
	// members, known in advance (none: a cluster of one).
	Gossip *Gossip
	Peers  []*pcluster.Member
	// Avoid is the placement's rule for keeping kinds apart (Placement.Avoid).
	Avoid map[string][]string
	// Directory is the store where a cluster's placement records where its
	// grains live (Placement.Directory); nil for a cluster of fixed members.
	Directory persistence.Store
	// Needs is the base model a grain needs (Placement.Needs).
	Needs func(kind, identity string) (string, error)
}

// Start joins the actor system to a cluster with the given grain kinds and
// returns once this member hosts them.
func Start(sys *actor.ActorSystem, cfg Config, kinds ...*pcluster.Kind) (c *pcluster.Cluster, err error) {
	opts := []remote.ConfigOption{
		remote.WithServerOptions(grpc.MaxRecvMsgSize(MaxMessage), grpc.MaxSendMsgSize(MaxMessage)),
		remote.WithCallOptions(grpc.MaxCallRecvMsgSize(MaxMessage), grpc.MaxCallSendMsgSize(MaxMessage))}
	if cfg.Advertise != "" {
		opts = append(opts, remote.WithAdvertisedHost(cfg.Advertise))
	}
	rc := remote.Configure(cfg.Host, cfg.Port, opts...)
	var provider pcluster.ClusterProvider = &Static{Peers: cfg.Peers}
	placement := &Placement{Avoid: cfg.Avoid, Directory: cfg.Directory, Needs: cfg.Needs}
	if g := cfg.Gossip; g != nil {
		provider, placement.Weight, placement.Load, placement.Serves, placement.Free = g, g.Weight, g.Load, g.Serves, g.Free
	}
	cc := pcluster.Configure(cfg.Name, provider, placement, rc,
		pcluster.WithKinds(kinds...), pcluster.WithRequestTimeout(cfg.RequestTimeout))
	c = pcluster.New(sys, cc)
	defer func() {
		// protoactor panics when the provider cannot start (a join that
		// found nobody, a gossip port taken).
		if p := recover(); p != nil {
			if c.Remote != nil {
				c.Remote.Shutdown(false)
			}
			c, err = nil, fmt.Errorf("cluster %s: %v", cfg.Name, p)
		}
	}()
	c.StartMember()
	if len(c.MemberList.Members().Members()) == 0 {
		return nil, fmt.Errorf("cluster %s: this member did not join", cfg.Name)
	}
	return c, nil
}

// Static is a ClusterProvider whose topology is this member and a fixed
// list of peers.
type Static struct {
	Peers []*pcluster.Member
}

// StartMember announces this member, with its kinds, and the peers.
func (p *Static) StartMember(c *pcluster.Cluster) error {
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return fmt.Errorf("member address: %w", err)
	}
	self := &pcluster.Member{Id: c.ActorSystem.ID, Host: host, Port: int32(port), Kinds: c.GetClusterKinds()}
	c.MemberList.UpdateClusterTopology(append([]*pcluster.Member{self}, p.Peers...))
	return nil
}

// StartClient is refused: every process that joins hosts grains.
func (*Static) StartClient(*pcluster.Cluster) error {
	return fmt.Errorf("a static cluster has no clients")
}

// Shutdown has nothing to leave.
func (*Static) Shutdown(bool) error { return nil }
