package blobs_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/internal/testbin"
)

func TestParseS3URL(t *testing.T) {
	for _, c := range []struct {
		url  string
		want blobs.S3Options
	}{
		{"s3://bkt", blobs.S3Options{Bucket: "bkt"}},
		{"s3://bkt/a/b/", blobs.S3Options{Bucket: "bkt", Prefix: "a/b/"}},
		{"s3://bkt/blocks?endpoint=127.0.0.1:7070&region=eu-west-1&insecure=1",
			blobs.S3Options{Bucket: "bkt", Prefix: "blocks/", Endpoint: "127.0.0.1:7070", Region: "eu-west-1", Insecure: true}},
		{"s3://bkt/p?insecure=0", blobs.S3Options{Bucket: "bkt", Prefix: "p/"}},
	} {
		got, err := blobs.ParseS3URL(c.url)
		if err != nil || got != c.want {
			t.Errorf("ParseS3URL(%q) = %+v, %v; want %+v", c.url, got, err, c.want)
		}
	}
	for _, bad := range []string{
		"http://bkt/p", "s3:///p", "s3://key:secret@bkt/p", "s3://bkt/p?endpoint=http://h:1",
		"s3://bkt/p?insecure=yes", "s3://bkt/p?endpont=h:1",
	} {
		if _, err := blobs.ParseS3URL(bad); err == nil {
			t.Errorf("ParseS3URL(%q) accepted it", bad)
		}
	}
}

func s3Options(srv *testbin.S3Server, prefix string) blobs.S3Options {
	return blobs.S3Options{Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: prefix, Insecure: true,
		Region: "us-east-1", AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, RetryFor: 2 * time.Second}
}

func openS3(t *testing.T, o blobs.S3Options) *blobs.S3 {
	t.Helper()
	s, err := blobs.OpenS3(bg, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func list(t *testing.T, s blobs.Store) []blobs.Key {
	t.Helper()
	var ks []blobs.Key
	if err := s.List(bg, func(k blobs.Key) error { ks = append(ks, k); return nil }); err != nil {
		t.Fatalf("List: %v", err)
	}
	slices.SortFunc(ks, func(a, b blobs.Key) int { return strings.Compare(a.String(), b.String()) })
	return ks
}

// TestS3 runs the S3 store against a real S3 server (versitygw on a
// directory): round trips, absent keys, listing under a prefix, wrong
// content on the server, and refused credentials and buckets.
func TestS3(t *testing.T) {
	srv := testbin.StartS3(t)
	s := openS3(t, s3Options(srv, "store1/"))
	other := openS3(t, s3Options(srv, "store2"))

	var keys []blobs.Key
	for i, n := range []int{0, 1, 32 << 10, 1 << 20} {
		k, data := blob(i, n)
		if err := s.Put(bg, k, data); err != nil {
			t.Fatalf("Put of %d bytes: %v", n, err)
		}
		mustGet(t, s, k, data)
		keys = append(keys, k)
	}
	k9, d9 := blob(9, 100)
	if err := other.Put(bg, k9, d9); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(keys, func(a, b blobs.Key) int { return strings.Compare(a.String(), b.String()) })
	if got := list(t, s); !slices.Equal(got, keys) {
		t.Fatalf("List = %v, want %v", got, keys)
	}
	if got := list(t, other); !slices.Equal(got, []blobs.Key{k9}) {
		t.Fatalf("List of the other prefix = %v, want only %v", got, k9)
	}
	if ok, err := s.Has(bg, keys[0]); !ok || err != nil {
		t.Fatalf("Has of a stored key: %v, %v", ok, err)
	}
	if ok, err := s.Has(bg, k9); ok || err != nil {
		t.Fatalf("Has of a key stored under another prefix: %v, %v", ok, err)
	}
	if _, err := s.Get(bg, k9); !errors.Is(err, blobs.ErrNotFound) {
		t.Fatalf("Get of an absent key: %v, want ErrNotFound", err)
	}
	if err := s.Delete(bg, keys[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(bg, keys[0]); err != nil {
		t.Fatalf("Delete of an absent key: %v", err)
	}
	if _, err := s.Get(bg, keys[0]); !errors.Is(err, blobs.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := s.Put(bg, keys[0], d9); !errors.Is(err, blobs.ErrCorrupt) {
		t.Fatalf("Put under the wrong key: %v, want ErrCorrupt", err)
	}

	// An object changed on the server is refused, not returned.
	k1, d1 := blob(2, 32<<10)
	file := filepath.Join(srv.BucketDir(), "store1", k1.String()[:2], k1.String())
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(bg, k1); !errors.Is(err, blobs.ErrCorrupt) {
		t.Fatalf("Get of an object changed on the server: %v, want ErrCorrupt", err)
	}
	if err := s.Put(bg, k1, d1); err != nil {
		t.Fatal(err)
	}
	mustGet(t, s, k1, d1)

	bad := s3Options(srv, "")
	bad.SecretKey = "wrong"
	if _, err := blobs.OpenS3(bg, bad); !errors.Is(err, blobs.ErrDenied) || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
		t.Fatalf("OpenS3 with a wrong secret: %v, want ErrDenied naming the credentials", err)
	}
	bad = s3Options(srv, "")
	bad.Bucket = "nosuchbucket"
	if _, err := blobs.OpenS3(bg, bad); !errors.Is(err, blobs.ErrDenied) || !strings.Contains(err.Error(), "nosuchbucket") {
		t.Fatalf("OpenS3 of a missing bucket: %v, want ErrDenied naming it", err)
	}
	s.Close()
	if _, err := s.Get(bg, k1); !errors.Is(err, blobs.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
}

// TestS3Outage stops the S3 server mid-run: operations fail with
// ErrUnavailable naming the endpoint once RetryFor has passed, the cache
// still serves what it holds, an operation started during the outage
// completes once the server is back, and everything works again after.
func TestS3Outage(t *testing.T) {
	srv := testbin.StartS3(t)
	s := openS3(t, s3Options(srv, "p/"))
	c := openCache(t, s, t.TempDir(), 1<<20)
	patient := s3Options(srv, "p/")
	patient.RetryFor = 5 * time.Minute
	ps := openS3(t, patient)
	k1, d1 := blob(1, 10000)
	if err := c.Put(bg, k1, d1); err != nil {
		t.Fatal(err)
	}

	srv.Stop(t)
	k2, d2 := blob(2, 10000)
	err := c.Put(bg, k2, d2)
	if !errors.Is(err, blobs.ErrUnavailable) || !strings.Contains(err.Error(), srv.Endpoint) {
		t.Fatalf("Put with the server stopped: %v, want ErrUnavailable naming %s", err, srv.Endpoint)
	}
	t.Logf("the error: %v", err)
	if _, err := c.Get(bg, k2); !errors.Is(err, blobs.ErrUnavailable) {
		t.Fatalf("Get of an uncached blob with the server stopped: %v, want ErrUnavailable", err)
	}
	mustGet(t, c, k1, d1) // from the cache

	// A Put that starts during the outage and may retry long enough
	// completes once the server is back.
	before := ps.Retries()
	done := make(chan error, 1)
	k3, d3 := blob(3, 10000)
	go func() { done <- ps.Put(bg, k3, d3) }()
	for ps.Retries() == before { // the Put has failed once at least
		select {
		case err := <-done:
			t.Fatalf("Put with the server stopped returned %v before retrying", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	srv.Start(t)
	if err := <-done; err != nil {
		t.Fatalf("Put retried across the outage: %v", err)
	}
	if err := c.Put(bg, k2, d2); err != nil {
		t.Fatalf("Put after the server came back: %v", err)
	}
	for _, b := range []struct {
		k blobs.Key
		d []byte
	}{{k1, d1}, {k2, d2}, {k3, d3}} {
		mustGet(t, s, b.k, b.d)
	}
}
