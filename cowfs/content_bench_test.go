package cowfs_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/blobs"
	. "github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/internal/testbin"
	"github.com/branchnfs/branchnfs/kv"
)

// open returns a view of a new tree of a new Badger store on disk, and a
// function that reopens the tree with another blob store.
func open(b *testing.B, opts Options) (*View, func(blobs.Store) *View) {
	ctx := context.Background()
	st, err := kv.OpenBadger(b.TempDir(), kv.BadgerOptions{GCInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	s, err := Open(ctx, st, opts)
	if err != nil {
		b.Fatal(err)
	}
	l, err := s.NewTree(ctx, 0o755, 0, 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	return s.View([]LayerID{l}), func(bl blobs.Store) *View {
		o := opts
		o.Blobs = bl
		s, err := Open(ctx, st, o)
		if err != nil {
			b.Fatal(err)
		}
		return s.View([]LayerID{l})
	}
}

// BenchmarkContentStore measures sequential 1 MiB writes and reads of an
// 8 MiB file (32 KiB blocks) with the content in the kv store (Badger on
// disk) and in a blob store: the disk cache over a Mem, and the disk cache
// over S3 (versitygw on loopback; reads come from the cache, "cold" reads
// from S3 with an empty cache). It is where docs/benchmarks.md's figures
// for blocks in object storage come from.
func BenchmarkContentStore(b *testing.B) {
	data := make([]byte, 8<<20)
	rand.NewChaCha8([32]byte{5}).Read(data)
	type variant struct {
		name string
		open func(b *testing.B) blobs.Store // nil: the kv store
	}
	cache := func(b *testing.B, back blobs.Store) blobs.Store {
		c, err := blobs.OpenCache(back, blobs.CacheOptions{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	s3 := func(b *testing.B) blobs.Store {
		srv := testbin.StartS3(b)
		s, err := blobs.OpenS3(b.Context(), blobs.S3Options{Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "p/", Insecure: true,
			Region: "us-east-1", AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, RetryFor: 5 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	for _, v := range []variant{
		{"kv", nil},
		{"cache+mem", func(b *testing.B) blobs.Store { return cache(b, blobs.NewMem()) }},
		{"cache+s3", func(b *testing.B) blobs.Store { return cache(b, s3(b)) }},
	} {
		for _, op := range []string{"write", "read", "coldread"} {
			if op == "coldread" && v.name != "cache+s3" {
				continue
			}
			b.Run(v.name+"/op="+op, func(b *testing.B) {
				opts := Options{}
				var back blobs.Store
				if v.open != nil {
					if op == "coldread" {
						back = s3(b)
						opts.Blobs = back
					} else {
						opts.Blobs = v.open(b)
					}
				}
				f, reopen := open(b, opts)
				a, err := f.Create(RootIno, "f", CreateGuarded, NewAttr{Mode: 0o644}, 0)
				if err != nil {
					b.Fatal(err)
				}
				if op != "write" {
					for off := 0; off < len(data); off += 1 << 20 {
						if _, err := f.WriteAt(a.Ino, data[off:off+1<<20], int64(off)); err != nil {
							b.Fatal(err)
						}
					}
					if op == "coldread" {
						// Read through an empty cache from here on.
						f = reopen(cache(b, back))
					}
				}
				buf := make([]byte, 1<<20)
				b.SetBytes(1 << 20)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					off := (i * (1 << 20)) % len(data)
					if op == "write" {
						if _, err := f.WriteAt(a.Ino, data[off:off+1<<20], int64(off)); err != nil {
							b.Fatal(err)
						}
						continue
					}
					if op == "coldread" && off == 0 && i > 0 {
						b.StopTimer()
						f = reopen(cache(b, back))
						b.StartTimer()
					}
					if _, _, err := f.ReadAt(a.Ino, buf, int64(off)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
