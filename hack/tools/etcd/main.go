// Command etcd is the etcd server the local test cluster runs, built from the pinned release.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
