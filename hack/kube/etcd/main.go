// Command etcd is etcd's own server entry point: the module
// go.etcd.io/etcd/server/v3 has the server but no main package to build.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
