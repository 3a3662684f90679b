package etcdtest_test

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// TestTLS runs the 3-member cluster over TLS with client certificates
// required: an etcds:// URL with the right certificates in ETCDCTL_CACERT,
// ETCDCTL_CERT and ETCDCTL_KEY passes a subset of the conformance suite,
// and missing or wrong certificates fail at open with an error that names
// the variable to fix.
func TestTLS(t *testing.T) {
	certs := etcdtest.NewCerts(t)
	c := etcdtest.StartCluster(t, etcdtest.Options{TLS: &certs})
	if !strings.HasPrefix(c.URL, "etcds://") {
		t.Fatalf("URL of a TLS cluster: %s", c.URL)
	}
	env := func(ca, cert, key string) {
		t.Setenv(etcdkv.EnvCACert, ca)
		t.Setenv(etcdkv.EnvCert, cert)
		t.Setenv(etcdkv.EnvKey, key)
	}
	// A short request timeout: a refused handshake must not hang an open.
	opts := etcdkv.Options{RequestTimeout: 5 * time.Second}
	n := 0
	open := func(t *testing.T) kv.Store {
		n++
		s, err := etcdkv.OpenURL(fmt.Sprintf("%s/tls/%d", c.URL, n), opts)
		if err != nil {
			t.Fatalf("open over TLS with the right certificates: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	t.Run("RightCerts", func(t *testing.T) {
		env(certs.CA, certs.ClientCert, certs.ClientKey)
		subset := map[string]bool{"PointOps": true, "IterateOrder": true, "ViewIsSnapshot": true, "ReadConflicts": true, "SizeCompactReclaim": true}
		for _, tc := range kvtest.Cases {
			if subset[tc.Name] {
				t.Run(tc.Name, func(t *testing.T) { tc.Fn(t, open(t)) })
			}
		}
		// A member that is down does not stop the others from answering.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		down := l.Addr().String()
		l.Close()
		s, err := etcdkv.OpenURL(strings.Replace(c.URL, "etcds://", "etcds://"+down+",", 1)+"/tls/down", opts)
		if err != nil {
			t.Fatalf("open with one member down: %v", err)
		}
		s.Close()
		co, err := etcdkv.OpenCoordURL(c.URL+"/tls/coord", opts)
		if err != nil {
			t.Fatalf("OpenCoordURL over TLS: %v", err)
		}
		defer co.Close()
		if _, err := co.Revision(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("PlainCluster", func(t *testing.T) {
		env(certs.CA, certs.ClientCert, certs.ClientKey)
		plain := etcdtest.StartCluster(t, etcdtest.Options{Members: 1})
		_, err := etcdkv.OpenURL(strings.Replace(plain.URL, "etcd://", "etcds://", 1), opts)
		if err == nil || !strings.Contains(err.Error(), "serves plain HTTP") || !strings.Contains(err.Error(), "etcd://") {
			t.Fatalf("etcds:// to a plain member: %v, want an error saying to use etcd://", err)
		}
	})
	other := etcdtest.NewCerts(t) // an authority the members do not trust
	for _, tc := range []struct {
		name, ca, cert, key string
		want                []string // in the error
	}{
		{"NoClientCert", certs.CA, "", "", []string{"refused this client's TLS handshake", etcdkv.EnvCert, etcdkv.EnvKey}},
		{"ClientCertOfAnotherCA", certs.CA, other.ClientCert, other.ClientKey, []string{"refused this client's TLS handshake", etcdkv.EnvCert, etcdkv.EnvKey}},
		{"NoCA", "", certs.ClientCert, certs.ClientKey, []string{"does not trust the certificate", etcdkv.EnvCACert}},
		{"WrongCA", other.CA, certs.ClientCert, certs.ClientKey, []string{"does not trust the certificate", etcdkv.EnvCACert}},
		{"MissingCAFile", filepath.Join(t.TempDir(), "none.pem"), certs.ClientCert, certs.ClientKey, []string{etcdkv.EnvCACert + "="}},
		{"CAFileNotPEM", certs.ClientKey, certs.ClientCert, certs.ClientKey, []string{etcdkv.EnvCACert + "=", "no PEM certificate"}},
		{"CertWithoutKey", certs.CA, certs.ClientCert, "", []string{etcdkv.EnvCert, etcdkv.EnvKey, "set both"}},
		{"KeyOfAnotherCert", certs.CA, certs.ClientCert, other.ClientKey, []string{etcdkv.EnvCert + "=", etcdkv.EnvKey + "="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env(tc.ca, tc.cert, tc.key)
			start := time.Now()
			s, err := etcdkv.OpenURL(c.URL+"/tls/bad", opts)
			if err == nil {
				s.Close()
				t.Fatal("open succeeded")
			}
			t.Logf("failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if _, err := etcdkv.OpenCoordURL(c.URL+"/tls/bad", opts); err == nil || !strings.Contains(err.Error(), tc.want[0]) {
				t.Errorf("OpenCoordURL: %v, want an error naming %s", err, tc.want[0])
			}
		})
	}
}
