package blobs_test

import (
	"testing"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/internal/testbin"
)

// BenchmarkS3 compares, for a 40 KiB block against versitygw on loopback,
// a Put (through the cache: the S3 upload, then the cached file), a Has
// of a missing block (a HEAD), a Get from S3, and a Get served by the
// cache (read and hash check).
func BenchmarkS3(b *testing.B) {
	srv := testbin.StartS3(b)
	s, err := blobs.OpenS3(bg, blobs.S3Options{Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "bench/", Insecure: true,
		Region: "us-east-1", AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	if err != nil {
		b.Fatal(err)
	}
	c, err := blobs.OpenCache(s, blobs.CacheOptions{Dir: b.TempDir(), MaxBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const size = 40 << 10
	k, data := blob(0, size)
	if err := c.Put(bg, k, data); err != nil {
		b.Fatal(err)
	}
	b.Run("Put", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; b.Loop(); i++ {
			k, data := blob(i+1, size)
			if err := c.Put(bg, k, data); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The existence check a write makes before each upload (a HEAD), for
	// a block the bucket does not hold.
	b.Run("HasMissing", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			k, _ := blob(-i-1, size)
			if ok, err := c.Has(bg, k); err != nil || ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("GetS3", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if _, err := s.Get(bg, k); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("GetCached", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if _, err := c.Get(bg, k); err != nil {
				b.Fatal(err)
			}
		}
	})
}
