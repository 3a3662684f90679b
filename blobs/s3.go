package blobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Options configures an S3 store. ParseS3URL fills the location from a
// URL; the zero value of the rest means defaults.
type S3Options struct {
	// Endpoint is the service's host:port (default s3.amazonaws.com).
	Endpoint string
	// Bucket holds the blobs; it must exist.
	Bucket string
	// Prefix is put before every object name ("" or ending in "/"): a
	// blob is stored as Prefix + the key's first two hex digits + "/" +
	// the key in hex.
	Prefix string
	// Region is the bucket's region ("" lets the client ask the service).
	Region string
	// Insecure talks plain HTTP instead of HTTPS.
	Insecure bool
	// AccessKey, SecretKey and SessionToken are the credentials. Empty
	// AccessKey means the usual AWS sources: the environment variables
	// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN,
	// then the shared credentials file (~/.aws/credentials, or
	// AWS_SHARED_CREDENTIALS_FILE, profile AWS_PROFILE).
	AccessKey, SecretKey, SessionToken string
	// RetryFor is how long an operation retries transient failures (no
	// connection, a timeout, a 5xx answer, throttling) before it returns
	// ErrUnavailable (default 10 s).
	RetryFor time.Duration
	// RequestTimeout bounds one attempt of a request (default 60 s).
	RequestTimeout time.Duration
	// Logger receives a warning when the service stops answering and a
	// note when it answers again (default slog.Default()).
	Logger *slog.Logger
}

// EnsureDefaults fills zero fields with defaults.
func (o *S3Options) EnsureDefaults() {
	if o.Endpoint == "" {
		o.Endpoint = "s3.amazonaws.com"
	}
	if o.RetryFor <= 0 {
		o.RetryFor = 10 * time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 60 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// ParseS3URL parses s3://bucket/prefix?endpoint=host:port&region=r&insecure=1
// into the location fields of S3Options. endpoint defaults to AWS S3,
// region to asking the service, insecure (1 or true: plain HTTP) to 0.
func ParseS3URL(raw string) (S3Options, error) {
	var o S3Options
	u, err := url.Parse(raw)
	if err != nil {
		return o, fmt.Errorf("blobs: %q is not a URL: %w", raw, err)
	}
	if u.Scheme != "s3" || u.Host == "" {
		return o, fmt.Errorf("blobs: %q: want s3://bucket/prefix?endpoint=host:port&region=REGION&insecure=1", raw)
	}
	if u.User != nil {
		return o, fmt.Errorf("blobs: %q: credentials do not go in the URL; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", raw)
	}
	o.Bucket = u.Host
	if p := strings.Trim(u.Path, "/"); p != "" {
		o.Prefix = p + "/"
	}
	for k, v := range u.Query() {
		val := v[len(v)-1]
		switch k {
		case "endpoint":
			if val == "" || strings.Contains(val, "/") {
				return o, fmt.Errorf("blobs: %q: endpoint=%q must be host or host:port, without a scheme or path", raw, val)
			}
			o.Endpoint = val
		case "region":
			o.Region = val
		case "insecure":
			switch val {
			case "1", "true":
				o.Insecure = true
			case "0", "false", "":
			default:
				return o, fmt.Errorf("blobs: %q: insecure=%q: want 1 or 0", raw, val)
			}
		default:
			return o, fmt.Errorf("blobs: %q: unknown parameter %q (known: endpoint, region, insecure)", raw, k)
		}
	}
	return o, nil
}

// S3 is a Store in an S3 bucket.
type S3 struct {
	c    *minio.Client
	o    S3Options // read only
	name string    // endpoint and bucket, for messages

	closed  atomic.Bool
	down    atomic.Bool  // the last attempt failed transiently
	retries atomic.Int64 // attempts retried, for tests and metrics
	// noCreate: the service answered a conditional upload with Not
	// Implemented; Create uploads unconditionally.
	noCreate atomic.Bool
}

var (
	_ Store   = (*S3)(nil)
	_ Sizer   = (*S3)(nil)
	_ Creator = (*S3)(nil)
)

// OpenS3 connects to the bucket and checks that it exists and the
// credentials may read it (retrying transient failures for RetryFor).
func OpenS3(ctx context.Context, o S3Options) (*S3, error) {
	o.EnsureDefaults()
	if o.Bucket == "" {
		return nil, errors.New("blobs: no bucket: give s3://bucket/prefix")
	}
	if o.Prefix != "" && !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	creds := credentials.NewStaticV4(o.AccessKey, o.SecretKey, o.SessionToken)
	if o.AccessKey == "" {
		creds = credentials.NewChainCredentials([]credentials.Provider{&credentials.EnvAWS{}, &credentials.FileAWSCredentials{}})
	}
	c, err := minio.New(o.Endpoint, &minio.Options{
		Creds:      creds,
		Secure:     !o.Insecure,
		Region:     o.Region,
		MaxRetries: 1, // we retry, with our own bound and messages
	})
	if err != nil {
		return nil, fmt.Errorf("blobs: S3 endpoint %q: %w", o.Endpoint, err)
	}
	scheme := "https"
	if o.Insecure {
		scheme = "http"
	}
	s := &S3{c: c, o: o, name: fmt.Sprintf("%s://%s bucket %s", scheme, o.Endpoint, o.Bucket)}
	var ok bool
	err = s.retry(ctx, "checking the bucket", "", func(ctx context.Context) error {
		var err error
		ok, err = c.BucketExists(ctx, o.Bucket)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s does not exist: create it, or fix the bucket in the s3:// URL", ErrDenied, s.name)
	}
	return s, nil
}

// Retries reports how many attempts were retried since Open.
func (s *S3) Retries() int64 { return s.retries.Load() }

func (s *S3) object(k Key) string {
	h := k.String()
	return s.o.Prefix + h[:2] + "/" + h
}

// keyOf parses an object name back into its key; ok is false for names
// that are not blobs.
func (s *S3) keyOf(name string) (Key, bool) {
	rest, ok := strings.CutPrefix(name, s.o.Prefix)
	if !ok || len(rest) != 3+2*Size || rest[2] != '/' || rest[:2] != rest[3:5] {
		return Key{}, false
	}
	k, err := ParseKey(rest[3:])
	return k, err == nil
}

func (s *S3) Put(ctx context.Context, key Key, data []byte) error {
	if err := checkPut(key, data); err != nil {
		return err
	}
	return s.retry(ctx, "Put", s.object(key), func(ctx context.Context) error {
		_, err := s.c.PutObject(ctx, s.o.Bucket, s.object(key), bytes.NewReader(data), int64(len(data)),
			minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true})
		return err
	})
}

// Create puts data with If-None-Match: *, so a service that holds the
// object refuses the upload (412 Precondition Failed) before storing it.
// A service that rejects the header as not implemented gets plain Puts
// from then on (one ignoring it overwrites the object with the same
// bytes, which is harmless).
func (s *S3) Create(ctx context.Context, key Key, data []byte) (bool, error) {
	if err := checkPut(key, data); err != nil {
		return false, err
	}
	if s.noCreate.Load() {
		return true, s.Put(ctx, key, data)
	}
	exists, unsupported := false, false
	err := s.retry(ctx, "Put", s.object(key), func(ctx context.Context) error {
		opts := minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true}
		opts.SetMatchETagExcept("*")
		_, err := s.c.PutObject(ctx, s.o.Bucket, s.object(key), bytes.NewReader(data), int64(len(data)), opts)
		switch r := minio.ToErrorResponse(err); {
		case err == nil:
		case r.StatusCode == 412 || r.Code == "PreconditionFailed":
			exists = true // maybe by an earlier attempt whose answer was lost
			return nil
		case r.StatusCode == 501 || r.Code == "NotImplemented":
			unsupported = true
			return nil
		}
		return err
	})
	if err != nil {
		return false, err
	}
	if unsupported {
		if !s.noCreate.Swap(true) {
			s.o.Logger.Info("blobs: the S3 service does not take conditional uploads: each new blob is an upload of its own, existing ones too", "endpoint", s.name)
		}
		return true, s.Put(ctx, key, data)
	}
	return !exists, nil
}

func (s *S3) Get(ctx context.Context, key Key) ([]byte, error) {
	var data []byte
	err := s.retry(ctx, "Get", s.object(key), func(ctx context.Context) error {
		obj, err := s.c.GetObject(ctx, s.o.Bucket, s.object(key), minio.GetObjectOptions{})
		if err != nil {
			return err
		}
		defer obj.Close()
		data, err = io.ReadAll(obj)
		return err
	})
	if err != nil {
		return nil, err
	}
	if got := Sum(data); got != key {
		return nil, fmt.Errorf("%w: %s object %s holds %d bytes that hash to %s: it was changed outside branchnfs; restore it or delete it so that it is written again",
			ErrCorrupt, s.name, s.object(key), len(data), got)
	}
	return data, nil
}

func (s *S3) Has(ctx context.Context, key Key) (bool, error) {
	err := s.retry(ctx, "Has", s.object(key), func(ctx context.Context) error {
		_, err := s.c.StatObject(ctx, s.o.Bucket, s.object(key), minio.StatObjectOptions{})
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (s *S3) Delete(ctx context.Context, key Key) error {
	err := s.retry(ctx, "Delete", s.object(key), func(ctx context.Context) error {
		return s.c.RemoveObject(ctx, s.o.Bucket, s.object(key), minio.RemoveObjectOptions{})
	})
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// callerErr carries an error of List's fn through the retry loop
// unchanged.
type callerErr struct{ err error }

func (e callerErr) Error() string { return e.err.Error() }

func (s *S3) List(ctx context.Context, fn func(Key) error) error {
	return s.ListSizes(ctx, func(k Key, _ int64) error { return fn(k) })
}

func (s *S3) ListSizes(ctx context.Context, fn func(Key, int64) error) error {
	after := "" // the last object passed to fn: a retry resumes after it
	err := s.retry(ctx, "List", s.o.Prefix, func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // stops the listing goroutine when fn fails
		for obj := range s.c.ListObjects(ctx, s.o.Bucket, minio.ListObjectsOptions{Prefix: s.o.Prefix, Recursive: true, StartAfter: after}) {
			if obj.Err != nil {
				return obj.Err
			}
			if k, ok := s.keyOf(obj.Key); ok {
				if err := fn(k, obj.Size); err != nil {
					return callerErr{err}
				}
			}
			after = obj.Key
		}
		return nil
	})
	if ce, ok := err.(callerErr); ok {
		return ce.err
	}
	return err
}

// Close marks the store closed; requests under way finish.
func (s *S3) Close() error {
	s.closed.Store(true)
	return nil
}

// errClass sorts a failed attempt.
type errClass int

const (
	permanent errClass = iota
	transient          // retry
	notFound
	denied
)

func classify(err error) errClass {
	r := minio.ToErrorResponse(err)
	switch r.Code {
	case "NoSuchKey":
		return notFound
	case "NoSuchBucket", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled", "InvalidBucketName", "ExpiredToken", "InvalidToken":
		return denied
	case "SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "RequestTimeTooSkewed",
		"ConditionalRequestConflict": // another conditional upload of the key under way (AWS)
		return transient
	}
	switch {
	case r.StatusCode == 404 && r.Code == "":
		return notFound
	case r.StatusCode == 401 || r.StatusCode == 403:
		return denied
	case r.StatusCode >= 500 || r.StatusCode == 429 || r.StatusCode == 408:
		return transient
	case r.StatusCode != 0 || r.Code != "":
		return permanent // an answer that retrying will not change
	}
	// No answer from the service: a network error, a timeout, a
	// connection cut mid-body.
	return transient
}

// retry runs fn until it succeeds, fails for good, or transient failures
// have gone on for RetryFor, with exponential backoff (50 ms doubling to
// 2 s, with jitter). Each attempt gets RequestTimeout.
func (s *S3) retry(ctx context.Context, op, object string, fn func(context.Context) error) error {
	start := time.Now()
	delay := 50 * time.Millisecond
	what := op
	if object != "" {
		what = op + " of " + object
	}
	for attempt := 1; ; attempt++ {
		if s.closed.Load() {
			return ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
		err := fn(actx)
		cancel()
		if err == nil {
			if s.down.CompareAndSwap(true, false) {
				s.o.Logger.Info("blobs: S3 answers again", "endpoint", s.name)
			}
			return nil
		}
		if _, ok := err.(callerErr); ok {
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("blobs: %s at %s: %w (%v)", what, s.name, cerr, err)
		}
		switch classify(err) {
		case notFound:
			return fmt.Errorf("%w: %s at %s", ErrNotFound, what, s.name)
		case denied:
			return fmt.Errorf("%w: %s at %s: %v; check the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), that the bucket exists, and that its policy lets them read, write, list and delete objects",
				ErrDenied, what, s.name, err)
		case permanent:
			return fmt.Errorf("blobs: %s at %s: %w", what, s.name, err)
		}
		elapsed := time.Since(start)
		if elapsed+delay > s.o.RetryFor {
			s.down.Store(true)
			return fmt.Errorf("%w: %s at %s failed %d times in %v (last: %v); check that the service runs and answers at that address (the endpoint= of the s3:// URL), the network and TLS setting (insecure=1 for plain HTTP) on the way, and the service's logs",
				ErrUnavailable, what, s.name, attempt, elapsed.Round(time.Millisecond), err)
		}
		if s.down.CompareAndSwap(false, true) {
			s.o.Logger.Warn("blobs: S3 does not answer; retrying", "endpoint", s.name, "op", what, "err", err, "retry_for", s.o.RetryFor)
		}
		s.retries.Add(1)
		t := time.NewTimer(delay/2 + rand.N(delay/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("blobs: %s at %s: %w (%v)", what, s.name, ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, 2*time.Second)
	}
}
