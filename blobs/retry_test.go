package blobs_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/blobs"
)

// fakeS3 answers HEAD of the bucket with 200 and every other request
// with the status next returns (200 means a plain success).
func fakeS3(t *testing.T, next func(r *http.Request) int) (endpoint string, requests *atomic.Int64) {
	requests = &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead && strings.Trim(r.URL.Path, "/") == "bkt" {
			return
		}
		requests.Add(1)
		code := next(r)
		if code == http.StatusOK {
			w.Header().Set("ETag", `"0"`)
			return
		}
		codes := map[int]string{503: "SlowDown", 500: "InternalError", 403: "AccessDenied", 400: "InvalidArgument",
			412: "PreconditionFailed", 501: "NotImplemented"}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(code)
		w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + codes[code] + `</Code><Message>test</Message></Error>`))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), requests
}

// TestS3RetriesServerErrors: 5xx answers are retried with backoff until
// one succeeds; a refusal (403) and a bad request (400) are not retried;
// 5xx answers past RetryFor end in ErrUnavailable.
func TestS3RetriesServerErrors(t *testing.T) {
	var status atomic.Int64
	var failures atomic.Int64
	endpoint, requests := fakeS3(t, func(*http.Request) int {
		if failures.Add(-1) >= 0 {
			return int(status.Load())
		}
		return http.StatusOK
	})
	s, err := blobs.OpenS3(bg, blobs.S3Options{Endpoint: endpoint, Bucket: "bkt", Insecure: true, Region: "us-east-1",
		AccessKey: "k", SecretKey: "s", RetryFor: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k, data := blob(1, 100)
	for _, code := range []int{503, 500} {
		status.Store(int64(code))
		failures.Store(3)
		requests.Store(0)
		before := s.Retries()
		if err := s.Put(bg, k, data); err != nil {
			t.Fatalf("Put after three %d answers: %v", code, err)
		}
		if n, r := requests.Load(), s.Retries()-before; n != 4 || r != 3 {
			t.Fatalf("Put after three %d answers: %d requests, %d retries; want 4 and 3", code, n, r)
		}
	}
	for _, c := range []struct {
		code int
		want error
	}{{403, blobs.ErrDenied}, {400, nil}} {
		status.Store(int64(c.code))
		failures.Store(3)
		requests.Store(0)
		err := s.Put(bg, k, data)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) || errors.Is(err, blobs.ErrUnavailable) {
			t.Fatalf("Put answered %d: %v, want %v", c.code, err, c.want)
		}
		if n := requests.Load(); n != 1 {
			t.Fatalf("Put answered %d was sent %d times, want once", c.code, n)
		}
	}
	status.Store(503)
	failures.Store(1 << 30)
	requests.Store(0)
	start := time.Now()
	err = s.Put(bg, k, data)
	if !errors.Is(err, blobs.ErrUnavailable) || !strings.Contains(err.Error(), endpoint) {
		t.Fatalf("Put answered 503 for good: %v, want ErrUnavailable naming %s", err, endpoint)
	}
	if n := requests.Load(); n < 3 {
		t.Fatalf("%d requests in %v: the backoff did not retry", n, time.Since(start))
	}
}

// TestS3CreateConditional: Create sends one conditional PUT (If-None-Match:
// *); a 412 answer means the bucket holds the blob (stored false); a
// service that answers Not Implemented gets a plain PUT, and from then
// on only plain PUTs.
func TestS3CreateConditional(t *testing.T) {
	var conditional, supported atomic.Bool
	supported.Store(true)
	var exists atomic.Bool
	endpoint, requests := fakeS3(t, func(r *http.Request) int {
		if r.Method != http.MethodPut {
			return http.StatusBadRequest
		}
		if r.Header.Get("If-None-Match") == "*" {
			conditional.Store(true)
			if !supported.Load() {
				return http.StatusNotImplemented
			}
			if exists.Load() {
				return http.StatusPreconditionFailed
			}
		}
		return http.StatusOK
	})
	s, err := blobs.OpenS3(bg, blobs.S3Options{Endpoint: endpoint, Bucket: "bkt", Insecure: true, Region: "us-east-1",
		AccessKey: "k", SecretKey: "s", RetryFor: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k, data := blob(1, 100)
	for _, c := range []struct {
		exists, supported bool
		stored            bool
		requests          int64
		conditional       bool
	}{
		{false, true, true, 1, true},
		{true, true, false, 1, true},
		{true, false, true, 2, true}, // Not Implemented, then a plain PUT
		{true, true, true, 1, false}, // plain PUTs from then on
	} {
		exists.Store(c.exists)
		supported.Store(c.supported)
		conditional.Store(false)
		requests.Store(0)
		stored, err := s.Create(bg, k, data)
		if err != nil || stored != c.stored || requests.Load() != c.requests || conditional.Load() != c.conditional {
			t.Fatalf("Create (exists %v, conditional PUTs supported %v): stored %v, %v, %d requests, conditional %v; want stored %v, %d requests, conditional %v",
				c.exists, c.supported, stored, err, requests.Load(), conditional.Load(), c.stored, c.requests, c.conditional)
		}
	}
}
