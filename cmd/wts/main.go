// Command wts is the service's single binary: it runs a node, administers
// one (keys, credentials, organizations), makes and samples models
// locally, and talks to a running service as a user would. `wts help`
// lists the commands; each takes --help.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"

	httpapi "github.com/wts-project/wts/http"
)

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	err := run(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return // the help was asked for, and printed
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wts:", err)
		os.Exit(1)
	}
}

// command is one (sub)command: its name, its arguments and what it does,
// for the help, and its body.
type command struct {
	name, args, help string
	run              func(args []string) error
}

// commands are wts's own, in the order the help lists them.
var commands = []command{
	{"serve", "[--data DIR] [--addr HOST:PORT] [--model NAME=DIR] ...", "run a node of the service (docs/operations.md)", serveCmd},
	{"keys", "create ...", "make API keys (on a node's data folder or its admin socket)", keysCmd},
	{"credentials", "add ...", "register a hub token or provider key (sealed; never returned)", credentialsCmd},
	{"orgs", "credit|set|show ...", "an organization's ledger: grant credit, set its default ceiling and byok key", orgsCmd},
	{"node", "[--data DIR]", "a running node's devices and capacity", nodeCmd},
	{"voters", "...", "a cluster's store voters", votersCmd},
	{"model", "init|info|export ...", "generate a model folder, or describe one", modelCmd},
	{"sample", "--model DIR --prompt 1,2,3 ...", "sample a model folder locally, without a service", sampleCmd},
	{"bench", "sample ...", "benchmarks users run against a service or a node of their own", benchCmd},
	{"openapi", "", "print the API's OpenAPI document", func([]string) error {
		_, err := os.Stdout.Write(append(httpapi.OpenAPI(), '\n'))
		return err
	}},
	{"models", "", "the service's model catalog (--url, --key: env WTS_URL, WTS_API_KEY)", modelsCmd},
	{"sessions", "list|show|close ...", "the caller's sessions", sessionsCmd},
	{"runs", "list|show|finish ...", "the caller's runs", runsCmd},
	{"ops", "list|show|wait ...", "a run's operations; wait shows progress", opsCmd},
	{"checkpoints", "RUN_ID", "a run's checkpoints", checkpointsCmd},
	{"artifacts", "RUN_ID", "a run's artifacts", artifactsCmd},
	{"exports", "EXPORT_ID", "a hub export", exportsCmd},
	{"download", "ARTIFACT_ID [--format peft|merged] [--out DIR]", "download an artifact's files, checked against their SHA-256", downloadCmd},
}

func run(args []string) error { return sub("", args, commands) }

// sub runs the command of list that args name (under parent, for the
// help), or prints the help of list.
func sub(parent string, args []string, list []command) error {
	name := strings.TrimSpace("wts " + parent)
	if len(args) == 0 || args[0] == "help" || args[0] == "--help" || args[0] == "-h" {
		w := tabwriter.NewWriter(os.Stderr, 0, 4, 2, ' ', 0)
		fmt.Fprintf(w, "usage: %s <command> [flags] [arguments]; each command takes --help\n\n", name)
		for _, c := range list {
			fmt.Fprintf(w, "  %s %s\t%s\n", c.name, c.args, c.help)
		}
		w.Flush()
		if len(args) == 0 {
			return fmt.Errorf("name a command (%s help lists them)", name)
		}
		return flag.ErrHelp
	}
	for _, c := range list {
		if c.name == args[0] {
			return c.run(args[1:])
		}
	}
	return fmt.Errorf("unknown command %q (%s help lists them)", args[0], name)
}
