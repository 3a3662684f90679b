package etcdkv

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/branchnfs/branchnfs/kv"
)

// ParseURL parses etcd://host:port,host:port/prefix into the members'
// endpoints and the key prefix ("/prefix/"; the default prefix when the
// URL has no path). etcd:// speaks plain HTTP to the members, etcds://
// TLS (https endpoints; see TLSFromEnv for the certificates).
func ParseURL(raw string) (endpoints []string, prefix string, err error) {
	const want = "want etcd://host:port[,host:port...][/prefix], or etcds:// for TLS"
	// Not url.Parse: it takes what follows the last colon of the host
	// list as one port, and refuses h1:2379,h2.
	name, rest, ok := strings.Cut(raw, "://")
	scheme := map[string]string{"etcd": "http://", "etcds": "https://"}[name]
	hosts, path, _ := strings.Cut(rest, "/")
	if !ok || scheme == "" || hosts == "" || strings.ContainsAny(rest, "?#@ ") {
		return nil, "", fmt.Errorf("etcdkv: %q: %s", raw, want)
	}
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			return nil, "", fmt.Errorf("etcdkv: %q: empty member address: %s", raw, want)
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), "2379")
		}
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			return nil, "", fmt.Errorf("etcdkv: %q: member address %q: %s", raw, h, want)
		}
		endpoints = append(endpoints, scheme+h)
	}
	if p := strings.Trim(path, "/"); p != "" {
		prefix = "/" + p + "/"
	}
	return endpoints, prefix, nil
}

// urlConfig returns the client configuration and options for raw: the
// URL's prefix, when it has one, replaces opts.Prefix, and an etcds://
// URL gets its TLS settings from the environment (TLSFromEnv).
func urlConfig(raw string, opts Options) (clientv3.Config, Options, bool, error) {
	endpoints, prefix, err := ParseURL(raw)
	if err != nil {
		return clientv3.Config{}, opts, false, err
	}
	if prefix != "" {
		opts.Prefix = prefix
	}
	cfg := clientv3.Config{Endpoints: endpoints}
	secure := strings.HasPrefix(endpoints[0], "https://")
	if secure {
		if cfg.TLS, err = TLSFromEnv(nil); err != nil {
			return cfg, opts, secure, err
		}
		timeout := cmp.Or(opts.RequestTimeout, 10*time.Second)
		if err := probeTLS(context.Background(), endpoints, cfg.TLS, timeout); err != nil {
			return cfg, opts, secure, err
		}
	}
	return cfg, opts, secure, nil
}

// OpenURL is Open for a cluster named by an etcd:// or etcds:// URL
// (ParseURL): the URL's prefix, when it has one, replaces opts.Prefix.
func OpenURL(raw string, opts Options) (kv.Store, error) {
	cfg, opts, secure, err := urlConfig(raw, opts)
	if err != nil {
		return nil, err
	}
	x, err := Open(cfg, opts)
	if err != nil && secure {
		err = tlsError(err)
	}
	return x, err
}

// OpenCoordURL is OpenCoord for a cluster named by an etcd:// or etcds://
// URL, with the URL's prefix and TLS settings as OpenURL takes them: the
// Coord of the store OpenURL opens with the same arguments.
func OpenCoordURL(raw string, opts Options) (*Coord, error) {
	cfg, opts, secure, err := urlConfig(raw, opts)
	if err != nil {
		return nil, err
	}
	x, err := OpenCoord(cfg, opts)
	if err != nil && secure {
		err = tlsError(err)
	}
	return x, err
}
