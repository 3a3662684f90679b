package nfsserver

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
)

func newHandleServer(tb testing.TB, secret byte) *Server {
	tb.Helper()
	s, err := New(Options{Branches: &secretBranches{fakeStore(), secret}})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

type secretBranches struct {
	*fakeBranches
	b byte
}

func (o *secretBranches) Secret() []byte { return bytes.Repeat([]byte{o.b}, 32) }

// TestHandleCache checks that handles met again (cached) encode and decode
// exactly as computed afresh, across more handles than the cache has
// slots, and that a cached handle's prefix with another MAC, or the same
// handle made with another secret, is still refused.
func TestHandleCache(t *testing.T) {
	s := newHandleServer(t, 7)
	fresh := newHandleServer(t, 7)
	fresh.handles = nil // computes every MAC
	other := newHandleServer(t, 9)
	var hs []fileHandle
	for i := range 3 * handleCacheSlots {
		hs = append(hs, fileHandle{viaRoot: i%3 == 0, branch: branches.BranchID(1 + i%5), ino: cowfs.InodeID(1000 + i), gen: cowfs.Gen(i % 7)})
	}
	for round := range 3 {
		for i, h := range hs {
			want := fresh.encodeHandle(h)
			got := s.encodeHandle(h)
			if !bytes.Equal(got, want) {
				t.Fatalf("round %d, handle %d: encoded %x, fresh %x", round, i, got, want)
			}
			d, err := s.decodeHandle(got)
			if err != nil || d != h {
				t.Fatalf("round %d, handle %d: decoded %+v, %v; want %+v", round, i, d, err, h)
			}
			if i%97 == 0 {
				forged := bytes.Clone(got)
				forged[handleLen-1] ^= 0x40
				if _, err := s.decodeHandle(forged); !errors.Is(err, errBadHandle) {
					t.Fatalf("handle %d with its MAC edited: %v, want errBadHandle", i, err)
				}
				if _, err := s.decodeHandle(got); err != nil {
					t.Fatalf("handle %d after a forgery of it: %v", i, err)
				}
				if _, err := s.decodeHandle(other.encodeHandle(h)); !errors.Is(err, errBadHandle) {
					t.Fatalf("handle %d made with another secret: %v, want errBadHandle", i, err)
				}
			}
		}
	}
}

// BenchmarkHandle measures encoding and decoding a handle met again (in
// the cache) and handles met once (n distinct handles, more than the
// cache holds).
func BenchmarkHandle(b *testing.B) {
	for _, n := range []int{1, 4 * handleCacheSlots} {
		s := newHandleServer(b, 7)
		hs := make([]fileHandle, n)
		raws := make([][]byte, n)
		for i := range hs {
			hs[i] = fileHandle{branch: 3, ino: cowfs.InodeID(100 + i), gen: 1}
			raws[i] = s.encodeHandle(hs[i])
		}
		b.Run(fmt.Sprintf("handles=%d/op=encode", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				s.encodeHandle(hs[i%n])
			}
		})
		b.Run(fmt.Sprintf("handles=%d/op=decode", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := s.decodeHandle(raws[i%n]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestHandleCacheConcurrent has goroutines encode and decode handles that
// share slots at the same time (run it with -race too): a handle read
// while another is written to its slot must never decode as verified
// with the other's bytes, nor be refused.
func TestHandleCacheConcurrent(t *testing.T) {
	s := newHandleServer(t, 7)
	fresh := newHandleServer(t, 7)
	fresh.handles = nil
	const n = 2 * handleCacheSlots
	want := make([][]byte, n)
	hs := make([]fileHandle, n)
	for i := range hs {
		hs[i] = fileHandle{branch: branches.BranchID(1 + i%3), ino: cowfs.InodeID(5000 + i), gen: 2}
		want[i] = fresh.encodeHandle(hs[i])
	}
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			for k := range 4 * n {
				i := (k*7 + g*1013) % n
				if got := s.encodeHandle(hs[i]); !bytes.Equal(got, want[i]) {
					errs <- fmt.Errorf("encode %d: %x, want %x", i, got, want[i])
					return
				}
				if d, err := s.decodeHandle(want[i]); err != nil || d != hs[i] {
					errs <- fmt.Errorf("decode %d: %+v, %v", i, d, err)
					return
				}
				forged := bytes.Clone(want[i])
				forged[30] ^= 1
				if _, err := s.decodeHandle(forged); err == nil {
					errs <- fmt.Errorf("forged %d accepted", i)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestHandleCachePrefix checks handleCache.macOf against handles stored in
// the same slot: it must give a MAC only for the very handle stored (a
// handle of a neighbouring branch, inode or generation once got another
// handle's MAC, and clients BADHANDLE for it).
func TestHandleCachePrefix(t *testing.T) {
	s := newHandleServer(t, 7)
	fresh := newHandleServer(t, 7)
	fresh.handles = nil
	var c handleCache
	n := 0
	for branch := uint64(1); branch < 0x600; branch += 7 {
		for ino := uint64(1); ino < 0x600; ino += 5 {
			for gen := uint64(0); gen < 3; gen++ {
				a := fresh.encodeHandle(fileHandle{branch: branches.BranchID(branch), ino: cowfs.InodeID(ino), gen: cowfs.Gen(gen)})
				b := fresh.encodeHandle(fileHandle{branch: branches.BranchID(branch ^ ino&0xff), ino: cowfs.InodeID(ino + gen), gen: cowfs.Gen(gen ^ 1)})
				sl := c.slot(a)
				sl.seq.Store(0) // empty the slot, then store a alone
				c.store(a)
				if got, ok := c.macOf(bytes.Clone(b[:28])); ok && !bytes.Equal(got, b) {
					t.Fatalf("macOf(%x) after storing %x gave %x, want no MAC", b[:28], a, got)
				}
				if got, ok := c.macOf(bytes.Clone(a[:28])); !ok || !bytes.Equal(got, a) {
					t.Fatalf("macOf(%x) = %x, %v; want %x", a[:28], got, ok, a)
				}
				n++
			}
		}
	}
	t.Logf("%d pairs", n)
	// The handles of the failure first seen: a branch's root and a file.
	for _, h := range []fileHandle{{branch: 0x4ff, ino: 1, gen: 1}, {branch: 0x4ff, ino: 0x4fe, gen: 1}} {
		if got, want := s.encodeHandle(h), fresh.encodeHandle(h); !bytes.Equal(got, want) {
			t.Fatalf("encode %+v = %x, want %x", h, got, want)
		}
	}
}
