package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Certs are PEM files of a certificate authority and of a server and a
// client certificate it signed, for 127.0.0.1 and localhost.
type Certs struct {
	CA                    string // the authority's certificate
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// NewCerts writes a fresh authority and its certificates into a new
// directory of tb's; each call makes an authority of its own.
func NewCerts(tb testing.TB) Certs {
	tb.Helper()
	dir := tb.TempDir()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			tb.Fatalf("etcdtest: generate a key: %v", err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			tb.Fatalf("etcdtest: %v", err)
		}
		return p
	}
	serial := int64(1)
	sign := func(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) (*x509.Certificate, []byte) {
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
		if parent == nil {
			parent = tmpl
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
		if err != nil {
			tb.Fatalf("etcdtest: sign a certificate: %v", err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			tb.Fatalf("etcdtest: %v", err)
		}
		return c, der
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			tb.Fatalf("etcdtest: %v", err)
		}
		return der
	}
	caKey := key()
	ca, caDER := sign(&x509.Certificate{
		Subject: pkix.Name{CommonName: "etcdtest CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil, &caKey.PublicKey, caKey)
	var c Certs
	c.CA = write("ca.pem", "CERTIFICATE", caDER)
	leaf := func(name string, usage x509.ExtKeyUsage) (string, string) {
		k := key()
		_, der := sign(&x509.Certificate{
			Subject: pkix.Name{CommonName: name}, DNSNames: []string{"localhost"},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
			KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}, ca, &k.PublicKey, caKey)
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", keyDER(k))
	}
	c.ServerCert, c.ServerKey = leaf("server", x509.ExtKeyUsageServerAuth)
	c.ClientCert, c.ClientKey = leaf("client", x509.ExtKeyUsageClientAuth)
	return c
}
