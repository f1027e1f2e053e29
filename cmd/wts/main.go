// Command wts is the service's single binary. Subcommands:
//
//	wts model init --preset NAME --seed S --out DIR [--dtype F32|BF16|F16]
//	wts model info DIR
//	wts sample --model DIR --prompt 1,2,3 [--max-tokens N --temperature T ...]
//	wts serve [--data DIR --addr HOST:PORT --model NAME=DIR ...]
//	wts keys create --org NAME [--live] [--data DIR]
//	wts credentials add --org NAME [--live] [--provider P] [--name LABEL] [--data DIR] < secret
//	wts orgs credit|set|show --org NAME [--live] [--microusd N] [--default-ceiling N|none] [--data DIR]
//	wts node [--data DIR]
//	wts openapi
package main

import (
	"fmt"
	"log/slog"
	"os"

	httpapi "github.com/wts-project/wts/http"
)

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "wts:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: wts <serve|keys|credentials|orgs|node|voters|model|sample|openapi> ...")
	}
	switch args[0] {
	case "model":
		return modelCmd(args[1:])
	case "sample":
		return sampleCmd(args[1:])
	case "serve":
		return serveCmd(args[1:])
	case "keys":
		return keysCmd(args[1:])
	case "credentials":
		return credentialsCmd(args[1:])
	case "orgs":
		return orgsCmd(args[1:])
	case "node":
		return nodeCmd(args[1:])
	case "voters":
		return votersCmd(args[1:])
	case "openapi":
		_, err := os.Stdout.Write(append(httpapi.OpenAPI(), '\n'))
		return err
	default:
		return fmt.Errorf("unknown command %q (want serve, keys, credentials, orgs, node, voters, model, sample or openapi)", args[0])
	}
}
