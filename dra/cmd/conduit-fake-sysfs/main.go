// conduit-fake-sysfs writes a fake sysfs tree of a named layout (internal/faketree) into a directory: a test
// tool, for the scenario tests that run conduit-dra-driver with --sysfs-root on it.
//
//	conduit-fake-sysfs --layout p5 DIR
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"conduit.dev/dra/internal/faketree"
)

func main() {
	layout := flag.String("layout", "8gpu-8nic", "the node's shape: "+strings.Join(names(), ", "))
	flag.Parse()
	make, ok := faketree.Layouts[*layout]
	if flag.NArg() != 1 || !ok {
		fmt.Fprintf(os.Stderr, "usage: conduit-fake-sysfs --layout %s DIR\n", strings.Join(names(), "|"))
		os.Exit(2)
	}
	if err := faketree.Write(flag.Arg(0), make()); err != nil {
		fmt.Fprintf(os.Stderr, "conduit-fake-sysfs: %v\n", err)
		os.Exit(1)
	}
}

func names() []string {
	var out []string
	for n := range faketree.Layouts {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
