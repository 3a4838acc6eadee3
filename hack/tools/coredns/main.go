// Command coredns is the DNS server of the local test cluster with real nodes: CoreDNS with only
// the plugin that resolves Services and pods by name (kubernetes), and errors, log and health for
// a Corefile that wants them. hack/cluster-bins.sh builds it from this module, which pins the release; it is not part
// of edgedrain.
package main

import (
	"fmt"
	"os"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
)

func main() {
	// In the order a query passes them, as CoreDNS's own plugin.cfg has them.
	if err := dnsserver.SetDirectives([]string{"errors", "log", "health", "kubernetes"}); err != nil {
		fmt.Fprintln(os.Stderr, "coredns:", err)
		os.Exit(1)
	}
	coremain.Run()
}
