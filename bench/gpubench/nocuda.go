//go:build !cuda

// Command gpubench measures the decode engine on a GPU; this build has no
// device code (build with -tags cuda after make cuda: bench/README.md).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "gpubench: built without -tags cuda (make cuda, then go build -tags cuda ./bench/gpubench)")
	os.Exit(2)
}
