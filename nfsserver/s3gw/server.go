package s3gw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/gofiber/fiber/v3"
	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/s3api"
	"github.com/versity/versitygw/s3api/middlewares"
	"github.com/versity/versitygw/s3api/utils"
	"github.com/versity/versitygw/s3err"
)

// Options configures a Server. The zero value means defaults, except
// Branches and Credentials.
type Options struct {
	Branches    *branches.Manager
	Credentials Credentials
	// Region is the region clients sign for (default us-east-1).
	Region string
	// Logger gets what the server cannot answer to a client: a temporary
	// or staging directory it failed to remove.
	Logger *slog.Logger
	// MaxConnections bounds the connections served at once (default 256).
	MaxConnections int
}

// EnsureDefaults fills in zero fields.
func (o *Options) EnsureDefaults() {
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = 256
	}
}

// Server is the S3 front end over a store's branches.
type Server struct {
	opts Options // read only
	be   *Backend
	srv  *s3api.S3ApiServer

	closed atomic.Bool
}

// parentKey is the request value holding the X-Branchnfs-Parent header.
const parentKey = "branchnfs-parent"

// parentFromContext returns the parent branch a CreateBucket request
// named (main by default). ctx is the request's fasthttp context.
func parentFromContext(ctx context.Context) string {
	if p, ok := ctx.Value(parentKey).(string); ok && p != "" {
		return p
	}
	return branches.MainBranch
}

// New makes the server; Serve runs it.
func New(opts Options) (*Server, error) {
	opts.EnsureDefaults()
	if opts.Branches == nil {
		return nil, errors.New("s3gw: no Branches")
	}
	if opts.Credentials.AccessKeyID == "" || opts.Credentials.SecretAccessKey == "" {
		return nil, errors.New("s3gw: no credentials (EnsureCredentials makes them)")
	}
	// Branch names allow upper case and '_': bucket names are checked as
	// branch names instead.
	utils.SetBucketNameValidationStrict(false)
	be := NewBackend(opts.Branches, opts.Logger)
	root := auth.Account{Access: opts.Credentials.AccessKeyID, Secret: opts.Credentials.SecretAccessKey, Role: auth.RoleAdmin}
	srv, err := s3api.New(be, middlewares.RootUserConfig{Access: root.Access, Secret: root.Secret}, opts.Region,
		auth.NewIAMServiceSingle(root), nil, nil, nil, nil,
		s3api.WithQuiet(),
		s3api.WithConcurrencyLimiter(opts.MaxConnections, opts.MaxConnections),
		s3api.WithMpMaxParts(10000),
		s3api.WithMiddleware("/", requireSignature),
	)
	if err != nil {
		return nil, fmt.Errorf("s3gw: %w", err)
	}
	return &Server{opts: opts, be: be, srv: srv}, nil
}

// requireSignature refuses anonymous requests (versitygw would otherwise
// look for public ACLs and policies) and passes the parent header of
// CreateBucket on to the backend.
func requireSignature(ctx fiber.Ctx) error {
	if ctx.Get("Authorization") == "" && !utils.IsPresignedURLAuth(ctx) {
		reqID, hostID := utils.EnsureRequestIDs(ctx)
		e := s3err.APIError{Code: "AccessDenied", HTTPStatusCode: 403,
			Description: "anonymous requests are refused: sign requests with the store's key (branchnfs s3 credentials prints it)"}
		ctx.Response().Header.SetContentType(fiber.MIMEApplicationXML)
		return ctx.Status(e.HTTPStatusCode).Send(e.XMLBody(reqID, hostID))
	}
	if p := ctx.Get(ParentHeader); p != "" {
		ctx.RequestCtx().SetUserValue(parentKey, p)
	}
	return ctx.Next()
}

// Serve listens on addr (host:port; a port must be given) and serves until
// Close. It returns nil after Close.
func (s *Server) Serve(addr string) error {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" || port == "0" {
		return fmt.Errorf("s3gw: listen address %q: want host:port with a port other than 0", addr)
	}
	if err := s.srv.ServeMultiPort([]string{addr}); err != nil && !s.closed.Load() {
		return fmt.Errorf("s3gw: %w", err)
	}
	return nil
}

// Close stops the server; requests in flight get up to 10 s to finish.
func (s *Server) Close() error {
	s.closed.Store(true)
	return s.srv.ShutDown()
}
