package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/nfsserver/s3gw"
	"github.com/spf13/cobra"
)

func newS3Command(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "s3",
		Short: "The S3 API of serve --s3: its credentials",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(newS3CredentialsCommand(g))
	return cmd
}

type s3CredentialsOptions struct {
	*globalOptions
	JSON bool
}

func newS3CredentialsCommand(g *globalOptions) *cobra.Command {
	opts := &s3CredentialsOptions{globalOptions: g}
	cmd := &cobra.Command{
		Use:   "credentials",
		Short: "Print the store's S3 access key and secret in the aws CLI's credentials format",
		Long: `Print the store's S3 access key and secret (STORE/s3.credentials, mode
0600, made with the store) as a [branchnfs] profile of the aws CLI's
credentials file:

  branchnfs s3 credentials >> ~/.aws/credentials

--json prints {"aws_access_key_id", "aws_secret_access_key"}.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runS3Credentials(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the credentials as JSON")
	return cmd
}

func runS3Credentials(o *s3CredentialsOptions) error {
	dir, err := o.storeDir()
	if err != nil {
		return err
	}
	if !storeExists(dir) {
		return fmt.Errorf("no store at %s: run branchnfs serve (or init) first, or pick the store with --store", dir)
	}
	c, err := s3gw.EnsureCredentials(dir)
	if err != nil {
		return err
	}
	if o.JSON {
		return writeJSON(o.stdout, c)
	}
	_, err = io.WriteString(o.stdout, c.Format())
	return err
}

// s3Server is serve --s3; a nil *s3Server (no --s3) does nothing.
type s3Server struct {
	srv  *s3gw.Server
	addr string
}

// checkS3Flag refuses a --s3 address that is malformed, or not loopback
// without --allow-remote (then it warns).
func checkS3Flag(o *serveOptions) error {
	if o.S3 == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(o.S3)
	if err != nil {
		return usagef("--s3 %q: %v (want host:port, e.g. 127.0.0.1:9000)", o.S3, err)
	}
	ip := net.ParseIP(host)
	if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		if !o.AllowRemote {
			return usagef("--s3 %q is not a loopback address: add --allow-remote if other machines should reach it (requests must be signed with the store's key, but travel unencrypted)", o.S3)
		}
		fmt.Fprintf(o.stderr, "branchnfs: WARNING: S3 API on %s: requests are signed but not encrypted (plain HTTP)\n", o.S3)
	}
	return nil
}

// startS3 makes the S3 server of serve --s3 addr (nil without --s3). Port 0
// picks a free port.
func startS3(o *serveOptions, dir string, mgr *branches.Manager, logger *slog.Logger) (*s3Server, error) {
	// The key pair is made with the store, as the control token is, so
	// that clients can be configured before an S3 server runs.
	creds, err := s3gw.EnsureCredentials(dir)
	if err != nil {
		return nil, err
	}
	if o.S3 == "" {
		return nil, nil
	}
	host, port, err := net.SplitHostPort(o.S3)
	if err != nil {
		return nil, usagef("--s3 %q: %v (want host:port, e.g. 127.0.0.1:9000)", o.S3, err)
	}
	if port == "0" {
		ln, err := net.Listen("tcp", o.S3)
		if err != nil {
			return nil, fmt.Errorf("--s3 %s: %w", o.S3, err)
		}
		port = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
	}
	srv, err := s3gw.New(s3gw.Options{Branches: mgr, Credentials: creds, Logger: logger})
	if err != nil {
		return nil, err
	}
	return &s3Server{srv: srv, addr: net.JoinHostPort(host, port)}, nil
}

func (s *s3Server) serve() error {
	if s == nil {
		return nil
	}
	if err := s.srv.Serve(s.addr); err != nil {
		return fmt.Errorf("s3 server: %w", err)
	}
	return nil
}

func (s *s3Server) close() {
	if s != nil {
		s.srv.Close()
	}
}

// banner says where the S3 API listens.
func (s *s3Server) banner(w io.Writer) {
	if s != nil {
		fmt.Fprintf(w, "S3 API: http://%s (path-style, region us-east-1; branchnfs s3 credentials prints the key)\n", s.addr)
	}
}
