package etcdkv

import (
	"slices"
	"testing"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in        string
		endpoints []string
		prefix    string
	}{
		{"etcd://h1:2379,h2:2380/store/one", []string{"http://h1:2379", "http://h2:2380"}, "/store/one/"},
		{"etcd://h1", []string{"http://h1:2379"}, ""},
		{"etcd://127.0.0.1:1234/", []string{"http://127.0.0.1:1234"}, ""},
		{"etcds://h1,h2:2380/p", []string{"https://h1:2379", "https://h2:2380"}, "/p/"},
		{"etcd://h1:2379,h2/p", []string{"http://h1:2379", "http://h2:2379"}, "/p/"},
		{"etcd://[::1]:2380,[::1]/a/b/", []string{"http://[::1]:2380", "http://[::1]:2379"}, "/a/b/"},
	} {
		eps, pfx, err := ParseURL(tc.in)
		if err != nil || !slices.Equal(eps, tc.endpoints) || pfx != tc.prefix {
			t.Errorf("ParseURL(%q) = %q, %q, %v; want %q, %q", tc.in, eps, pfx, err, tc.endpoints, tc.prefix)
		}
	}
	for _, bad := range []string{"http://h1:2379", "etcd:///p", "etcd://u:pw@h1/p", "etcd://h1,,h2/p", "etcd://h1/p?x=1", "etcds://h1/p?cacert=x", "etcdss://h1", "h1:2379", "etcd://h1:/p", "etcd://h1#x"} {
		if _, _, err := ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q) accepted it", bad)
		}
	}
}
