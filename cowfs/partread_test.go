package cowfs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// TestReadPartsOfBlocks reads byte ranges that start and end inside
// stored blocks, on a disk store (whose value reads take an offset) and
// an in-memory one, from files whose last block is short, that a
// truncate cut inside a stored block (the block's stored bytes run past
// the file's end) and that were extended past a truncate (zeros between),
// and checks every range against a model.
func TestReadPartsOfBlocks(t *testing.T) {
	const bs = 4096
	for _, disk := range []bool{false, true} {
		t.Run(fmt.Sprint("disk=", disk), func(t *testing.T) {
			st := kvtest.NewStore(t)
			if disk {
				st = kvtest.NewDiskStore(t)
			}
			_, f := newTestTree(t, st, Options{BlockSize: bs, InlineMax: 64})
			r := rand.New(rand.NewPCG(7, 7))
			fm := newFileModel(t, f)
			short := fm.create("short", randBytes(r, 9<<10))
			cut := fm.create("cut", randBytes(r, 5*bs))
			fm.truncate(cut, 2*bs+100)
			grown := fm.create("grown", randBytes(r, 3*bs))
			fm.truncate(grown, bs+10)
			fm.truncate(grown, 4*bs)
			for _, ino := range []InodeID{short, cut, grown} {
				want := fm.files[ino]
				for range 300 {
					off := r.IntN(len(want) + bs)
					n := 1 + r.IntN(2*bs)
					buf := bytes.Repeat([]byte{0xee}, n)
					got, _, err := f.ReadAt(ino, buf, int64(off))
					if err != nil {
						t.Fatal(err)
					}
					from := min(off, len(want))
					end := min(off+n, len(want))
					if got != end-from || !bytes.Equal(buf[:got], want[from:end]) {
						t.Fatalf("inode %d: read of %d at %d: %d bytes, differ from the model's %d", ino, n, off, got, end-from)
					}
				}
			}
		})
	}
}
