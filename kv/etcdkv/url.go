package etcdkv

import (
	"fmt"
	"net/url"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/branchnfs/branchnfs/kv"
)

// ParseURL parses etcd://host:port,host:port/prefix into the members'
// endpoints (plain HTTP) and the key prefix ("/prefix/"; the default
// prefix when the URL has no path).
func ParseURL(raw string) (endpoints []string, prefix string, err error) {
	const want = "want etcd://host:port[,host:port...][/prefix]"
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", fmt.Errorf("etcdkv: %q is not a URL (%v): %s", raw, err, want)
	}
	if u.Scheme != "etcd" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, "", fmt.Errorf("etcdkv: %q: %s", raw, want)
	}
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" || strings.Contains(h, "/") {
			return nil, "", fmt.Errorf("etcdkv: %q: empty member address: %s", raw, want)
		}
		if !strings.Contains(h, ":") {
			h += ":2379"
		}
		endpoints = append(endpoints, "http://"+h)
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		prefix = "/" + p + "/"
	}
	return endpoints, prefix, nil
}

// OpenURL is Open for a cluster named by an etcd:// URL (ParseURL): the
// URL's prefix, when it has one, replaces opts.Prefix.
func OpenURL(raw string, opts Options) (kv.Store, error) {
	endpoints, prefix, err := ParseURL(raw)
	if err != nil {
		return nil, err
	}
	if prefix != "" {
		opts.Prefix = prefix
	}
	return Open(clientv3.Config{Endpoints: endpoints}, opts)
}

// OpenCoordURL is OpenCoord for a cluster named by an etcd:// URL, with
// the URL's prefix as OpenURL takes it: the Coord of the store OpenURL
// opens with the same arguments.
func OpenCoordURL(raw string, opts Options) (*Coord, error) {
	endpoints, prefix, err := ParseURL(raw)
	if err != nil {
		return nil, err
	}
	if prefix != "" {
		opts.Prefix = prefix
	}
	return OpenCoord(clientv3.Config{Endpoints: endpoints}, opts)
}
