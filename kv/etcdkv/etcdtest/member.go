package etcdtest

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// MemberConfig is one member of a cluster whose members run as separate
// processes (RunMember), so that a test can SIGKILL one.
type MemberConfig struct {
	Name           string // unique in the cluster
	Dir            string // data directory (reused on a restart)
	PeerURL        string // http://127.0.0.1:PORT
	ClientURL      string // http://127.0.0.1:PORT
	InitialCluster string // name=peerURL,... of every member
	Token          string // the cluster's --initial-cluster-token
	// MaxTxnOps, MaxRequestBytes and QuotaBackendBytes are etcd's flags
	// of the same names; zero keeps etcd's defaults.
	MaxTxnOps         uint
	MaxRequestBytes   uint
	QuotaBackendBytes int64
}

// RunMember runs one etcd member until ctx ends, calling ready once it
// serves clients (a member restarted from its data directory serves once
// a majority runs). It returns the member's error if it fails.
func RunMember(ctx context.Context, c MemberConfig, ready func()) error {
	peer, err := url.Parse(c.PeerURL)
	if err != nil {
		return fmt.Errorf("etcdtest: peer URL: %w", err)
	}
	client, err := url.Parse(c.ClientURL)
	if err != nil {
		return fmt.Errorf("etcdtest: client URL: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = c.Name, c.Dir
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.InitialCluster, cfg.InitialClusterToken = c.InitialCluster, c.Token
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.LogLevel = "error"
	if c.MaxTxnOps > 0 {
		cfg.MaxTxnOps = c.MaxTxnOps
	}
	if c.MaxRequestBytes > 0 {
		cfg.MaxRequestBytes = c.MaxRequestBytes
	}
	if c.QuotaBackendBytes > 0 {
		cfg.QuotaBackendBytes = c.QuotaBackendBytes
	}
	m, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcdtest: start member %s: %w", c.Name, err)
	}
	defer m.Close()
	select {
	case <-m.Server.ReadyNotify():
		ready()
	case err := <-m.Err():
		return fmt.Errorf("etcdtest: member %s: %w", c.Name, err)
	case <-ctx.Done():
		return nil
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("etcdtest: member %s not ready after 5 minutes (is a majority of the cluster running?)", c.Name)
	}
	select {
	case err := <-m.Err():
		return fmt.Errorf("etcdtest: member %s: %w", c.Name, err)
	case <-ctx.Done():
		return nil
	}
}
