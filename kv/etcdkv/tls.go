package etcdkv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// The environment variables that give an etcds:// client its TLS settings,
// the same that etcdctl reads.
const (
	EnvCACert = "ETCDCTL_CACERT" // PEM file of the CA that signed the members' certificates
	EnvCert   = "ETCDCTL_CERT"   // PEM file of this client's certificate
	EnvKey    = "ETCDCTL_KEY"    // PEM file of its private key
)

// tlsHint says where an etcds:// client's TLS settings come from.
const tlsHint = "an etcds:// client takes its TLS settings from " + EnvCACert + " (the PEM file of the CA that signed the members' certificates; default the system's roots), " +
	EnvCert + " and " + EnvKey + " (this client's certificate and key, needed when the members run with --client-cert-auth)"

// TLSFromEnv returns the TLS configuration of an etcds:// client from
// ETCDCTL_CACERT, ETCDCTL_CERT and ETCDCTL_KEY as getenv reads them
// (os.Getenv when nil). An error names the variable to fix.
func TLSFromEnv(getenv func(string) string) (*tls.Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca := getenv(EnvCACert); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("etcdkv: %s=%s: %w; set it to the PEM file of the CA that signed the etcd members' certificates", EnvCACert, ca, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcdkv: %s=%s holds no PEM certificate; set it to the PEM file of the CA that signed the etcd members' certificates", EnvCACert, ca)
		}
		cfg.RootCAs = pool
	}
	cert, key := getenv(EnvCert), getenv(EnvKey)
	switch {
	case cert == "" && key == "":
	case cert == "" || key == "":
		return nil, fmt.Errorf("etcdkv: %s=%q and %s=%q: set both (this client's certificate and its key) or neither", EnvCert, cert, EnvKey, key)
	default:
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("etcdkv: %s=%s, %s=%s: %w; set them to this client's PEM certificate and the key that goes with it", EnvCert, cert, EnvKey, key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// tlsError adds to an error of an etcds:// client what to check.
func tlsError(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w; %s: check them", err, tlsHint)
}

// probeTLS connects to every member at once with cfg and returns an
// error that says what to fix when a TLS handshake fails: a member that
// refuses this client's certificate, or one this client does not trust.
// A refused handshake otherwise only shows as the client's time-out. It
// sends the HTTP/2 preface that gRPC would, so that a member that checks
// the client's certificate after the handshake (TLS 1.3) answers with its
// alert. It returns nil as soon as a member answers, and when none could
// be reached within timeout (Open then says so).
func probeTLS(ctx context.Context, endpoints []string, cfg *tls.Config, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	results := make(chan error, len(endpoints))
	for _, ep := range endpoints {
		go func() { results <- probeMember(ctx, ep, cfg) }()
	}
	for range endpoints {
		if err := <-results; err == nil || errors.Is(err, errTLSSettings) {
			return err
		}
	}
	return nil
}

// errTLSSettings marks a probe's answer that the TLS settings are wrong.
var errTLSSettings = errors.New("etcdkv: TLS settings")

// probeMember is probeTLS for one member: nil when it answered, an error
// wrapping errTLSSettings when the handshake failed, another when it
// could not be reached.
func probeMember(ctx context.Context, ep string, cfg *tls.Config) error {
	const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00" // and an empty SETTINGS frame
	addr := strings.TrimPrefix(ep, "https://")
	c := cfg.Clone()
	c.NextProtos = []string{"h2"}
	if c.ServerName == "" {
		if h, _, err := net.SplitHostPort(addr); err == nil {
			c.ServerName = h
		}
	}
	conn, err := (&tls.Dialer{Config: c}).DialContext(ctx, "tcp", addr)
	if errors.Is(err, io.EOF) {
		// A member serving plain HTTP closes the connection on the
		// client's hello.
		return fmt.Errorf("%w: etcd member %s closed the connection during the TLS handshake (%w): it likely serves plain HTTP; use an etcd:// URL, or start the members with --cert-file and --key-file", errTLSSettings, ep, err)
	}
	if err == nil {
		if d, ok := ctx.Deadline(); ok {
			conn.SetDeadline(d)
		}
		if _, err = io.WriteString(conn, preface); err == nil {
			_, err = conn.Read(make([]byte, 1))
		}
		conn.Close()
		if err == nil {
			return nil
		}
	}
	var opErr *net.OpError
	var verr *tls.CertificateVerificationError
	var rerr tls.RecordHeaderError
	switch {
	case errors.As(err, &opErr) && opErr.Op == "remote error":
		return fmt.Errorf("%w: etcd member %s refused this client's TLS handshake (%w): set %s and %s to a certificate and key signed by the CA the members trust (their --trusted-ca-file)", errTLSSettings, ep, err, EnvCert, EnvKey)
	case errors.As(err, &verr):
		return fmt.Errorf("%w: this client does not trust the certificate of etcd member %s (%w): set %s to the PEM file of the CA that signed the members' certificates", errTLSSettings, ep, err, EnvCACert)
	case errors.As(err, &rerr):
		return fmt.Errorf("%w: etcd member %s does not speak TLS on its client port (%w): it likely serves plain HTTP; use an etcd:// URL, or start the members with --cert-file and --key-file", errTLSSettings, ep, err)
	}
	return err
}
