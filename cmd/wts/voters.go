package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/wts-project/wts/persistence/etcdstore"
)

// votersCmd lists the cluster store's etcd voters, or removes one whose
// machine is gone for good (wts voters [remove NAME] --store HOST:PORT).
func votersCmd(args []string) error {
	fs := flag.NewFlagSet("voters", flag.ContinueOnError)
	store := fs.String("store", "", "HOST:PORT[,...] client address of a live voter: its node's --advertise port + 2")
	remove := ""
	if len(args) >= 2 && args[0] == "remove" {
		remove, args = args[1], args[2:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	addrs := splitList(*store)
	if len(addrs) == 0 || fs.NArg() > 0 {
		return fmt.Errorf("usage: wts voters [remove NAME] --store HOST:PORT[,...]")
	}
	if remove != "" {
		if err := etcdstore.RemoveVoter(addrs, remove); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "removed voter %s; its node must not start again with its old folder (DATA/nodes/%s/etcd)\n", remove, remove)
	}
	vs, err := etcdstore.Voters(addrs)
	if err != nil {
		return err
	}
	out, err := json.MarshalIndent(vs, "", "  ")
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}
