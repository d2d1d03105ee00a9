// Command etcd is a thin wrapper around etcd's own entry point, built from the
// Go module proxy so tests need neither Docker nor a distro package (Debian's
// etcd is too old for kube-apiserver >= 1.31).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
