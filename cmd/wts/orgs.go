package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	httpapi "github.com/wts-project/wts/http"
	"github.com/wts-project/wts/persistence"
)

// orgsCmd grants an organization credit, sets its default session
// ceiling, or shows its ledger (docs/billing.md), through a running node's
// admin socket, else on the stopped node's store; it prints the ledger.
func orgsCmd(args []string) error {
	op := func(name string) func([]string) error { return func(args []string) error { return orgsOp(name, args) } }
	return sub("orgs", args, []command{
		{"credit", "--org NAME [--live] --microusd N [--note TEXT]", "grant credit on the organization's ledger", op("credit")},
		{"set", "--org NAME [--live] [--default-ceiling N|none] [--byok-credential ID|none]", "set its default session ceiling and byok key", op("set")},
		{"show", "--org NAME [--live]", "print its ledger", op("show")},
	})
}

// orgsOp is orgs credit, set or show (op) with its flags args.
func orgsOp(op string, args []string) error {
	fs := flag.NewFlagSet("orgs "+op, flag.ContinueOnError)
	org := fs.String("org", "", "the organization")
	live := fs.Bool("live", false, "the ledger of its svc_live_ keys (default: its svc_test_ keys')")
	amount := fs.Int64("microusd", 0, "credit: the grant, in micro-USD (1 USD = 1000000)")
	note := fs.String("note", "", "credit: a note kept with the grant")
	ceiling := fs.String("default-ceiling", "", "set: the ceiling, in micro-USD, that a platform-funded session without max_cost_microusd reserves; none: up to 100 USD of the headroom")
	byok := fs.String("byok-credential", "", "set: the provider key (wts credentials add --provider) that funds sessions asking for funding auto without a credential_id; none: the platform funds them")
	data := fs.String("data", "./data", "data folder of the node (a running node is asked through its admin socket there)")
	node := nodeFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	req := httpapi.OrgRequest{Org: *org, Live: *live, MicroUSD: *amount, Note: *note}
	switch {
	case *org == "":
		return fmt.Errorf("orgs %s: --org is required", op)
	case op == "credit" && *amount < 1:
		return fmt.Errorf("orgs credit: --microusd must be at least 1")
	case op == "set" && *ceiling == "" && *byok == "":
		return fmt.Errorf("orgs set: give --default-ceiling (N micro-USD, or none) or --byok-credential (ID, or none)")
	}
	if op == "set" {
		switch *ceiling {
		case "":
		case "none":
			req.NoDefaultCeiling = true
		default:
			n, err := strconv.ParseInt(*ceiling, 10, 64)
			if err != nil || n < 1 {
				return fmt.Errorf("orgs set: --default-ceiling must be a whole number of micro-USD >= 1, or none")
			}
			req.DefaultCeiling = &n
		}
		if *byok != "" {
			id := *byok
			if id == "none" {
				id = ""
			}
			req.ByokCredential = &id
		}
	}
	var reply httpapi.OrgReply
	sock, err := adminCall(*data, *node, "/admin/orgs/"+op, req, &reply)
	if err != nil {
		st, oerr := persistence.Open(filepath.Join(*data, "wts.db"))
		if oerr != nil {
			return fmt.Errorf("orgs %s: %w (no node answers on %s either: %v)", op, oerr, sock, err)
		}
		defer st.Close()
		got, err := httpapi.OrgLedger(st, op, req, time.Now())
		if err != nil {
			return fmt.Errorf("orgs %s: %w", op, err)
		}
		reply = *got
	}
	out, err := json.MarshalIndent(reply, "", "  ")
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}
