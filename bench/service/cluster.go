package service

import (
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// PortBlock finds four consecutive free ports (TCP and UDP) on 127.0.0.1,
// what a cluster node takes from its --advertise port on: its gossip,
// actor remote, and etcd client and peer ports.
func PortBlock() (int, error) {
	for range 200 {
		// Below Linux's ephemeral range (32768 on), where the OS picks ports
		// for outgoing connections and for ":0" listeners.
		base, ok := 10000+rand.IntN(22000), true
		var open []interface{ Close() error }
		for p := base; p < base+4 && ok; p++ {
			addr := "127.0.0.1:" + strconv.Itoa(p)
			l, err := net.Listen("tcp", addr)
			if ok = err == nil; ok {
				open = append(open, l)
				u, err := net.ListenPacket("udp", addr)
				if ok = err == nil; ok {
					open = append(open, u)
				}
			}
		}
		for _, c := range open {
			c.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no four free ports")
}

// Node is a cluster node a benchmark or test started: its process and its
// name (DATA/nodes/NAME holds its own files).
type Node struct {
	*Process
	Name   string
	Gossip string // its --advertise address, which others join
}

// StartNode starts `wts serve` as a cluster node on the shared data folder
// (joining the given gossip addresses, or starting a cluster), with the
// extra flags; cmd makes the command from its arguments.
func StartNode(cmd func(args ...string) *exec.Cmd, data string, join []string, extra ...string) (*Node, error) {
	base, err := PortBlock()
	if err != nil {
		return nil, err
	}
	return StartNodeAt(cmd, data, "127.0.0.1:"+strconv.Itoa(base), join, extra...)
}

// StartNodeAt is StartNode on a given gossip address: a node that restarts
// takes its own again (and so its name and folder).
func StartNodeAt(cmd func(args ...string) *exec.Cmd, data, gossip string, join []string, extra ...string) (*Node, error) {
	args := append([]string{"serve", "--data", data, "--addr", "127.0.0.1:0", "--advertise", gossip}, extra...)
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	p, err := Start(cmd(args...))
	if err != nil {
		return nil, err
	}
	return &Node{Process: p, Name: strings.ReplaceAll(gossip, ":", "_"), Gossip: gossip}, nil
}

var firstKey = regexp.MustCompile(`svc_test_[0-9a-f]+`)

// FirstKey is the key a cluster's first node printed on its first start.
func (n *Node) FirstKey() string { return firstKey.FindString(n.Log()) }

// ServeCluster generates the preset model under data and starts n nodes
// of the wts binary on it as one cluster, at warn level, with the extra
// flags; each node's Process carries the first node's key and the model.
func ServeCluster(wts, data, preset string, n int, extra ...string) []*Node {
	dir, rev := Prepare(data, preset)
	extra = append([]string{"--model", preset + "=" + dir, "--log-level", "warn"}, extra...)
	cmd := func(args ...string) *exec.Cmd { return exec.Command(wts, args...) }
	var nodes []*Node
	for i := range n {
		var join []string
		if i > 0 {
			join = []string{nodes[0].Gossip}
		}
		node, err := StartNode(cmd, data, join, extra...)
		if err != nil {
			log.Fatal(err)
		}
		nodes = append(nodes, node)
	}
	key := nodes[0].FirstKey()
	if key == "" {
		log.Fatalf("the first node printed no key:\n%s", nodes[0].Log())
	}
	Credit(wts, data, "default")
	for _, node := range nodes {
		node.Key, node.Model, node.Revision, node.ModelDir = key, preset, rev, dir
	}
	return nodes
}
