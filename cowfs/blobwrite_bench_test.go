package cowfs_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/blobs"
	. "github.com/branchnfs/branchnfs/cowfs"
	"github.com/branchnfs/branchnfs/internal/testbin"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// BenchmarkBlobWrite measures 1 MiB writes (32 KiB blocks) with the
// blocks in S3 (versitygw on loopback, through the disk cache), the kv
// store on Badger, four ways alternated in one loop so that all see the
// same load: "head" asks whether each block exists before uploading it
// (as writes did), "put" always uploads, "create" uploads with a
// conditional PUT (If-None-Match: *, as with Options.Leases), "known" is
// "create" that skips blocks the Store uploaded lately (one server, the
// default). "new" writes blocks never seen, "same" the same 1 MiB again.
// It reports each one's milliseconds per write and its ratio to "head".
func BenchmarkBlobWrite(b *testing.B) {
	srv := testbin.StartS3(b)
	n := 0
	open := func(b *testing.B) (*Store, *View, InodeID) {
		n++
		raw, err := blobs.OpenS3(b.Context(), blobs.S3Options{Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: fmt.Sprintf("wbench%d/", n), Insecure: true,
			Region: "us-east-1", AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, RetryFor: 5 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		cache, err := blobs.OpenCache(raw, blobs.CacheOptions{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cache.Close() })
		s, err := Open(b.Context(), kvtest.NewDiskStore(b), Options{Blobs: cache})
		if err != nil {
			b.Fatal(err)
		}
		l, err := s.NewTree(b.Context(), 0o755, 0, 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		v := s.View([]LayerID{l})
		a, err := v.Create(RootIno, "f", CreateGuarded, NewAttr{Mode: 0o644}, 0)
		if err != nil {
			b.Fatal(err)
		}
		return s, v, a.Ino
	}
	names := []string{"head", "put", "create", "known"}
	for _, op := range []string{"new", "same"} {
		b.Run("op="+op, func(b *testing.B) {
			var views [4]*View
			var inos [4]InodeID
			for i := range names {
				var s *Store
				s, views[i], inos[i] = open(b)
				SetBlobWrite(s, names[i])
			}
			data := randBytes(rand.New(rand.NewPCG(8, 8)), 1<<20)
			var took [4]time.Duration
			b.SetBytes(4 << 20)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j, v := range views {
					if op == "new" {
						for blk := 0; blk < len(data); blk += 32 << 10 {
							binary.LittleEndian.PutUint64(data[blk:], uint64(4*i+j)) // every block new
						}
					}
					t0 := time.Now()
					if _, err := v.WriteAt(inos[j], data, 0); err != nil {
						b.Fatal(err)
					}
					took[j] += time.Since(t0)
				}
			}
			for j, name := range names {
				b.ReportMetric(float64(took[j].Microseconds())/1000/float64(b.N), name+"-ms/write")
			}
			for j, name := range names[1:] {
				b.ReportMetric(float64(took[j+1])/float64(took[0]), name+"/head")
			}
		})
	}
}
