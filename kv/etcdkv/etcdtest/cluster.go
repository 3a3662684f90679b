package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
)

// Options tunes a test cluster. The zero value means 3 members with the
// server's default limits.
type Options struct {
	// Members in the cluster (default 3).
	Members int
	// MaxTxnOps and MaxRequestBytes are the servers' --max-txn-ops and
	// --max-request-bytes (defaults 128 and 1.5 MiB, etcd's own).
	MaxTxnOps       uint
	MaxRequestBytes uint
	// QuotaBackendBytes is --quota-backend-bytes (default etcd's, 2 GiB).
	QuotaBackendBytes int64
	// TLS, when set, makes the members serve clients over TLS with these
	// certificates and require a client certificate signed by its
	// authority (--client-cert-auth); peers speak plain HTTP.
	TLS *Certs
}

// Cluster is a running etcd cluster.
type Cluster struct {
	// Endpoints are the members' client URLs.
	Endpoints []string
	// URL is the cluster as an etcd:// URL (etcds:// with TLS) without a
	// prefix.
	URL      string
	tls      *Certs
	cfgs     []*embed.Config // read only
	members  []*embed.Etcd
	stopped  []bool
	prefixes atomic.Int64
}

// freePorts returns n distinct loopback ports nobody listens on right now
// (all are held open until every one is chosen, so none repeats).
func freePorts(tb testing.TB, n int) []int {
	tb.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatalf("etcdtest: find a free port: %v", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// StartCluster starts a cluster and waits until it has a leader. It is
// stopped when tb ends.
func StartCluster(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	if opts.Members <= 0 {
		opts.Members = 3
	}
	dir := tb.TempDir()
	type urls struct{ peer, client url.URL }
	addrs := make([]urls, opts.Members)
	var initial []string
	ports := freePorts(tb, 2*opts.Members)
	clientScheme, urlScheme := "http", "etcd"
	if opts.TLS != nil {
		clientScheme, urlScheme = "https", "etcds"
	}
	for i := range addrs {
		addrs[i] = urls{
			peer:   url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i])},
			client: url.URL{Scheme: clientScheme, Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])},
		}
		initial = append(initial, fmt.Sprintf("m%d=%s", i, addrs[i].peer.String()))
	}
	c := &Cluster{stopped: make([]bool, opts.Members), members: make([]*embed.Etcd, opts.Members), tls: opts.TLS}
	var hosts []string
	for _, a := range addrs {
		hosts = append(hosts, a.client.Host)
	}
	c.URL = urlScheme + "://" + strings.Join(hosts, ",")
	for i := range addrs {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		cfg.ListenPeerUrls = []url.URL{addrs[i].peer}
		cfg.AdvertisePeerUrls = []url.URL{addrs[i].peer}
		cfg.ListenClientUrls = []url.URL{addrs[i].client}
		cfg.AdvertiseClientUrls = []url.URL{addrs[i].client}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = fmt.Sprintf("etcdtest-%s", addrs[0].peer.Port())
		cfg.ClusterState = embed.ClusterStateFlagNew
		// Quiet: a stopping member logs each listener it closes as an
		// error. Tests report what their own clients see instead.
		cfg.LogLevel = "panic"
		// etcd's own timing (100 ms heartbeats, 1 s elections): shorter ones
		// elect faster but see false leader losses on a loaded machine.
		if opts.MaxTxnOps > 0 {
			cfg.MaxTxnOps = opts.MaxTxnOps
		}
		if opts.MaxRequestBytes > 0 {
			cfg.MaxRequestBytes = opts.MaxRequestBytes
		}
		if opts.QuotaBackendBytes > 0 {
			cfg.QuotaBackendBytes = opts.QuotaBackendBytes
		}
		if t := opts.TLS; t != nil {
			cfg.ClientTLSInfo = transport.TLSInfo{CertFile: t.ServerCert, KeyFile: t.ServerKey, TrustedCAFile: t.CA, ClientCertAuth: true}
		}
		c.Endpoints = append(c.Endpoints, addrs[i].client.String())
		c.cfgs = append(c.cfgs, cfg)
	}
	tb.Cleanup(c.stopAll)
	c.start(tb)
	return c
}

// start starts every member that is not running, in parallel (a member
// is ready only once a majority runs), and waits until all are ready.
func (c *Cluster) start(tb testing.TB) {
	tb.Helper()
	errs := make([]error, len(c.cfgs))
	var wg sync.WaitGroup
	var started []int
	for i, cfg := range c.cfgs {
		if c.members[i] != nil && !c.stopped[i] {
			continue
		}
		started = append(started, i)
		wg.Go(func() {
			m, err := embed.StartEtcd(cfg)
			if err == nil {
				c.members[i], c.stopped[i] = m, false
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, i := range started {
		if errs[i] != nil {
			tb.Fatalf("etcdtest: start member %d: %v", i, errs[i])
		}
	}
	for _, i := range started {
		m := c.members[i]
		select {
		case <-m.Server.ReadyNotify():
		case err := <-m.Err():
			tb.Fatalf("etcdtest: member %d failed: %v", i, err)
		case <-time.After(60 * time.Second):
			tb.Fatalf("etcdtest: member %d not ready after 60 s", i)
		}
	}
}

// Restart stops every member and starts them again from their data
// directories, on the same ports. Clients reconnect by themselves.
func (c *Cluster) Restart(tb testing.TB) {
	tb.Helper()
	c.stopAll()
	c.start(tb)
}

// Stop stops member i, as a crash would for its clients.
func (c *Cluster) Stop(i int) {
	if !c.stopped[i] {
		c.stopped[i] = true
		c.members[i].Close()
	}
}

// stopAll stops the followers in parallel, then the leader. A leader
// stopping hands its leadership to a live follower first, and would wait
// seconds for one that is stopping too; with none left it stops at once.
func (c *Cluster) stopAll() {
	leader := -1
	var wg sync.WaitGroup
	for i, m := range c.members {
		if m == nil || c.stopped[i] {
			continue
		}
		if m.Server.Leader() == m.Server.MemberID() {
			leader = i
			continue
		}
		c.stopped[i] = true
		wg.Go(m.Close)
	}
	wg.Wait()
	if leader >= 0 {
		c.Stop(leader)
	}
}

// NewStore opens an etcdkv store on c, closed when tb ends, with its own
// client. Zero fields of opts get etcdkv's defaults; an empty Prefix gets a
// fresh one, and a store opened with the Prefix of another shares its keys,
// as a second server would.
func (c *Cluster) NewStore(tb testing.TB, opts etcdkv.Options) kv.Store {
	tb.Helper()
	if opts.Prefix == "" {
		opts.Prefix = fmt.Sprintf("/etcdtest/%d/", c.prefixes.Add(1))
	}
	s, err := etcdkv.Open(c.clientConfig(tb), opts)
	if err != nil {
		tb.Fatalf("etcdtest: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// NewCoord opens an etcdkv.Coord on c, closed when tb ends, with its own
// client (as another server would have). An empty opts.Prefix gets a
// fresh one.
func (c *Cluster) NewCoord(tb testing.TB, opts etcdkv.Options) *etcdkv.Coord {
	tb.Helper()
	if opts.Prefix == "" {
		opts.Prefix = fmt.Sprintf("/etcdtest/%d/", c.prefixes.Add(1))
	}
	co, err := etcdkv.OpenCoord(c.clientConfig(tb), opts)
	if err != nil {
		tb.Fatalf("etcdtest: %v", err)
	}
	tb.Cleanup(func() { co.Close() })
	return co
}

// clientConfig is the configuration of a client of c, with the cluster's
// client certificate when it serves TLS.
func (c *Cluster) clientConfig(tb testing.TB) clientv3.Config {
	tb.Helper()
	cfg := clientv3.Config{Endpoints: c.Endpoints, DialTimeout: 10 * time.Second}
	if c.tls != nil {
		env := map[string]string{etcdkv.EnvCACert: c.tls.CA, etcdkv.EnvCert: c.tls.ClientCert, etcdkv.EnvKey: c.tls.ClientKey}
		t, err := etcdkv.TLSFromEnv(func(k string) string { return env[k] })
		if err != nil {
			tb.Fatal(err)
		}
		cfg.TLS = t
	}
	return cfg
}

// Leader returns the index of the member that leads, or -1 if no running
// member knows a leader.
func (c *Cluster) Leader() int {
	for i, m := range c.members {
		if m == nil || c.stopped[i] {
			continue
		}
		lead := m.Server.Leader()
		for j, o := range c.members {
			if o != nil && !c.stopped[j] && uint64(o.Server.MemberID()) == uint64(lead) {
				return j
			}
		}
	}
	return -1
}
