package branches_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
)

// TestReclaimRace runs block sweeps, two at a time, while files are
// truncated to a last block that equals content no file references any
// more (the sweep's candidates): every file must read back whole
// afterwards.
func TestReclaimRace(t *testing.T) {
	const bs = 4096
	m := newManagerOpts(t, branches.Options{FS: cowfs.Options{BlockSize: bs, InlineMax: 64}})
	fs, _, err := m.View("main")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 6))
	rounds := 300
	if testing.Short() {
		rounds = 60
	}
	// Two sweepers: Reclaim must also be safe against itself.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := m.Reclaim(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	type file struct {
		ino  cowfs.InodeID
		want []byte
	}
	var files []file
	rnd := func(n int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(r.IntN(255) + 1)
		}
		return p
	}
	for i := 0; i < rounds; i++ {
		// Garbage: p stored as a second block, then truncated away.
		p := rnd(1000)
		g, err := fs.Create(cowfs.RootIno, fmt.Sprintf("g%d", i), cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fs.WriteAt(g.Ino, append(rnd(bs), p...), 0); err != nil {
			t.Fatal(err)
		}
		size := uint64(bs)
		if _, err := fs.SetAttr(g.Ino, cowfs.SetAttr{Size: &size}); err != nil {
			t.Fatal(err)
		}
		// A file whose truncated last block is p.
		b, err := fs.Create(cowfs.RootIno, fmt.Sprintf("b%d", i), cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := append(append(rnd(bs), p...), rnd(bs-len(p))...)
		if _, err := fs.WriteAt(b.Ino, want, 0); err != nil {
			t.Fatal(err)
		}
		want = want[:bs+len(p)]
		size = uint64(len(want))
		if _, err := fs.SetAttr(b.Ino, cowfs.SetAttr{Size: &size}); err != nil {
			t.Fatal(err)
		}
		files = append(files, file{b.Ino, want})
	}
	close(stop)
	wg.Wait()
	if _, err := m.Reclaim(ctx); err != nil {
		t.Fatal(err)
	}
	lost := 0
	for _, f := range files {
		got := make([]byte, len(f.want)+10)
		n, _, err := fs.ReadAt(f.ino, got, 0)
		if err != nil || !bytes.Equal(got[:n], f.want) {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d files lost a block to the sweep", lost, len(files))
	}
}
