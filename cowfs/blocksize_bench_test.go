package cowfs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/branchnfs/branchnfs/kv"
)

// BenchmarkBlockSize measures sequential 1 MiB writes and reads, and the
// store growth of 16 scattered 10-byte edits of a 32 MiB file (each in its
// own layer, as EDIT16 does), per block size. It is how the default block
// size was picked (docs/design.md).
func BenchmarkBlockSize(b *testing.B) {
	data := make([]byte, 32<<20)
	rand.NewChaCha8([32]byte{3}).Read(data)
	for _, bs := range []int{4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("bs=%dKiB/op=write", bs>>10), func(b *testing.B) {
			f, _, _ := newDiskFS(b, Options{BlockSize: bs})
			a, err := f.Create(RootIno, "f", CreateGuarded, NewAttr{Mode: 0o644}, 0)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(1 << 20)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				off := (i * (1 << 20)) % len(data)
				if _, err := f.WriteAt(a.Ino, data[off:off+1<<20], int64(off)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("bs=%dKiB/op=read", bs>>10), func(b *testing.B) {
			f, _, _ := newDiskFS(b, Options{BlockSize: bs})
			a, _ := f.Create(RootIno, "f", CreateGuarded, NewAttr{Mode: 0o644}, 0)
			for off := 0; off < len(data); off += 1 << 20 {
				if _, err := f.WriteAt(a.Ino, data[off:off+1<<20], int64(off)); err != nil {
					b.Fatal(err)
				}
			}
			buf := make([]byte, 1<<20)
			b.SetBytes(1 << 20)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				off := (i * (1 << 20)) % len(data)
				if _, _, err := f.ReadAt(a.Ino, buf, int64(off)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("bs=%dKiB/op=edit16", bs>>10), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				f, st, sto := newDiskFS(b, Options{BlockSize: bs})
				a, _ := f.Create(RootIno, "f", CreateGuarded, NewAttr{Mode: 0o644}, 0)
				for off := 0; off < len(data); off += 1 << 20 {
					f.WriteAt(a.Ino, data[off:off+1<<20], int64(off))
				}
				before := storeBytes(b, st)
				for r := 0; r < 16; r++ {
					top, err := sto.NewLayerOver(context.Background(), f.Top())
					if err != nil {
						b.Fatal(err)
					}
					f.SetTop(top)
					off := int64((uint64(r+1) * 2654435761) % (1<<25 - 10))
					if _, err := f.WriteAt(a.Ino, []byte("0123456789"), off); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(storeBytes(b, st)-before)/(1<<20), "MiB-added")
			}
		})
	}
}

func newDiskFS(b testing.TB, opts Options) (*View, kv.Store, *Store) {
	st, err := kv.OpenBadger(b.TempDir(), kv.BadgerOptions{GCInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	s, f := newTestTree(b, st, opts)
	return f, st, s
}

// storeBytes is the logical size of the store's keys and values, which is
// what the store grows by once compacted.
func storeBytes(b testing.TB, st kv.Store) int64 {
	var n int64
	err := st.View(context.Background(), func(tx kv.Txn) error {
		return tx.Iterate(nil, nil, false, func(k, v []byte) (bool, error) {
			n += int64(len(k) + len(v))
			return true, nil
		})
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}
