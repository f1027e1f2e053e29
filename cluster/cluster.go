// Package cluster places the service's grains (virtual actors) on members.
// Today a node's members are fixed when it starts: Static is the
// ClusterProvider that announces this member and the peers it was given
// (none for a single node). The memberlist provider will sit beside it, so
// callers build a cluster with Start and never see which provider runs it.
package cluster

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
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
	// Peers are the other members, known in advance (none: a cluster of
	// one).
	Peers []*pcluster.Member
}

// Start joins the actor system to a cluster with the given grain kinds and
// returns once this member hosts them.
func Start(sys *actor.ActorSystem, cfg Config, kinds ...*pcluster.Kind) (*pcluster.Cluster, error) {
	rc := remote.Configure(cfg.Host, cfg.Port,
		remote.WithServerOptions(grpc.MaxRecvMsgSize(MaxMessage), grpc.MaxSendMsgSize(MaxMessage)),
		remote.WithCallOptions(grpc.MaxCallRecvMsgSize(MaxMessage), grpc.MaxCallSendMsgSize(MaxMessage)))
	cc := pcluster.Configure(cfg.Name, &Static{Peers: cfg.Peers}, disthash.New(), rc,
		pcluster.WithKinds(kinds...), pcluster.WithRequestTimeout(cfg.RequestTimeout))
	c := pcluster.New(sys, cc)
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
