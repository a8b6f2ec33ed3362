// Command etcd is the pinned etcd server of Enclave's test control plane, built from the published module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
