// Command etcdmember runs one etcd member (the etcd server's embed
// package, the version in go.mod) as its own process, for the suites and
// benchmarks that need a real cluster whose members can be killed. It
// prints "ready" on stdout once the member serves clients, and stops on
// SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

func main() {
	var c etcdtest.MemberConfig
	flag.StringVar(&c.Name, "name", "", "member name, unique in the cluster")
	flag.StringVar(&c.Dir, "data-dir", "", "data directory")
	flag.StringVar(&c.PeerURL, "peer-url", "", "http://HOST:PORT for the other members")
	flag.StringVar(&c.ClientURL, "client-url", "", "http://HOST:PORT for clients")
	flag.StringVar(&c.InitialCluster, "initial-cluster", "", "name=peer-url,... of every member")
	flag.StringVar(&c.Token, "initial-cluster-token", "etcdmember", "the cluster's token")
	flag.UintVar(&c.MaxTxnOps, "max-txn-ops", 0, "etcd's --max-txn-ops (0: etcd's default)")
	flag.UintVar(&c.MaxRequestBytes, "max-request-bytes", 0, "etcd's --max-request-bytes (0: etcd's default)")
	flag.Int64Var(&c.QuotaBackendBytes, "quota-backend-bytes", 0, "etcd's --quota-backend-bytes (0: etcd's default)")
	flag.Parse()
	if c.Name == "" || c.Dir == "" || c.PeerURL == "" || c.ClientURL == "" || c.InitialCluster == "" {
		fmt.Fprintln(os.Stderr, "etcdmember: --name, --data-dir, --peer-url, --client-url and --initial-cluster are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := etcdtest.RunMember(ctx, c, func() { fmt.Println("ready") }); err != nil {
		fmt.Fprintln(os.Stderr, "etcdmember:", err)
		os.Exit(1)
	}
}
