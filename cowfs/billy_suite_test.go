package cowfs

import (
	"context"
	"errors"
	"flag"
	"os"
	"path"
	"syscall"
	"testing"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/helper/chroot"
	"github.com/go-git/go-billy/v5/test"
	"github.com/go-git/go-billy/v5/util"
	. "gopkg.in/check.v1"

	"github.com/branchnfs/branchnfs/kv"
)

// go-billy v5's own conformance suite (basic, dir, symlink, tempfile and
// chroot cases) runs against a fresh cowfs view per case, twice: on a root
// tree, and on a child layer over a populated, frozen parent, so every case
// also goes through copy-on-write lookups in a lower layer.
//
// go-billy's osfs and memfs create missing parent directories in Create,
// OpenFile(O_CREATE), Symlink, Rename and TempFile, and the suite relies on
// it. cowfs deliberately does not (POSIX and NFS semantics: a missing parent
// is ENOENT; TestBillyNoImplicitParents pins that). billyConv adds exactly
// that convention on top of cowfs, doing nothing else, so the rest of each
// suite case still checks cowfs.

func TestBillySuite(t *testing.T) { TestingT(t) }

type billySuite struct {
	test.FilesystemSuite
	fork  bool
	store kv.Store
}

var (
	_ = Suite(&billySuite{})
	_ = Suite(&billySuite{fork: true})
)

func (s *billySuite) SetUpTest(c *C) {
	ctx := context.Background()
	st, err := kv.OpenBadger("", kv.BadgerOptions{InMemory: true, GCInterval: -1,
		MemTableSize: 16 << 20, BlockCacheSize: 1 << 20, IndexCacheSize: 1 << 20})
	c.Assert(err, IsNil)
	s.store = st
	sto, err := Open(ctx, st, Options{BlockSize: 4096})
	c.Assert(err, IsNil)
	l, err := sto.NewTree(ctx, 0o755, 0, 0, nil)
	c.Assert(err, IsNil)
	f, err := sto.OpenView(ctx, l)
	c.Assert(err, IsNil)
	if s.fork {
		// Populate a parent with a name the suite never uses, freeze it,
		// run the suite on a child over it.
		c.Assert(f.Billy().MkdirAll("zz-base/sub", 0o755), IsNil)
		w, err := f.Billy().Create("zz-base/sub/file")
		c.Assert(err, IsNil)
		_, err = w.Write([]byte("base content"))
		c.Assert(err, IsNil)
		c.Assert(w.Close(), IsNil)
		top, err := sto.NewLayerOver(ctx, l)
		c.Assert(err, IsNil)
		f, err = sto.OpenView(ctx, top)
		c.Assert(err, IsNil)
		c.Assert(f.Billy().Remove("zz-base/sub/file"), IsNil)
		c.Assert(f.Billy().Remove("zz-base/sub"), IsNil)
		c.Assert(f.Billy().Remove("zz-base"), IsNil)
	}
	s.FilesystemSuite = test.NewFilesystemSuite(billyConv{f.Billy()})
}

func (s *billySuite) TearDownTest(c *C) {
	if s.store != nil {
		s.store.Close()
		s.store = nil
	}
}

// billyConv adds go-billy's implicit parent creation to a cowfs view.
type billyConv struct{ *Billy }

func (b billyConv) mkParent(p string) error {
	if d := path.Dir(path.Clean("/" + p)); d != "/" {
		return b.Billy.MkdirAll(d, 0o755)
	}
	return nil
}

func (b billyConv) Create(name string) (billy.File, error) {
	return b.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
}

func (b billyConv) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	if flag&os.O_CREATE != 0 {
		if err := b.mkParent(name); err != nil {
			return nil, err
		}
	}
	return b.Billy.OpenFile(name, flag, perm)
}

func (b billyConv) Symlink(target, link string) error {
	if err := b.mkParent(link); err != nil {
		return err
	}
	return b.Billy.Symlink(target, link)
}

func (b billyConv) Rename(from, to string) error {
	if err := b.mkParent(to); err != nil {
		return err
	}
	return b.Billy.Rename(from, to)
}

func (b billyConv) Chroot(p string) (billy.Filesystem, error) {
	if _, err := b.Billy.Chroot(p); err != nil { // validates p
		return nil, err
	}
	return chroot.New(b, p), nil
}

// TestBillyNoImplicitParents pins the behaviour billyConv papers over:
// cowfs answers ENOENT when the parent directory is missing.
func TestBillyNoImplicitParents(t *testing.T) {
	f, _, _ := newTestFS(t, Options{})
	b := f.Billy()
	if _, err := b.Create("nodir/f"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("Create in a missing dir: %v, want ENOENT", err)
	}
	if err := b.Symlink("x", "nodir/l"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("Symlink in a missing dir: %v, want ENOENT", err)
	}
	w, err := b.Create("f")
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := b.Rename("f", "nodir/f"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("Rename into a missing dir: %v, want ENOENT", err)
	}
	if _, err := b.Stat("nodir"); !os.IsNotExist(err) {
		t.Errorf("a failed call created the parent: %v", err)
	}
}

var billyFull = flag.Bool("billy.full", false, "run go-billy's TempFileMany cases at full size (102,400 files each)")

// TestTempFileMany and TestTempFileManyWithUtil upstream create and remove
// 1024 x 100 temp files, about 70 s per pass here (a speed matter, measured
// by benchmarks). By default they run the same steps 16 x 100 times;
// -billy.full runs the upstream cases.
func (s *billySuite) TestTempFileMany(c *C) {
	if *billyFull {
		s.FilesystemSuite.TempFileSuite.TestTempFileMany(c)
		return
	}
	s.tempFileMany(c, func() (billy.File, error) { return s.FS.TempFile("test-dir", "test-prefix") })
}

func (s *billySuite) TestTempFileManyWithUtil(c *C) {
	if *billyFull {
		s.FilesystemSuite.TempFileSuite.TestTempFileManyWithUtil(c)
		return
	}
	s.tempFileMany(c, func() (billy.File, error) { return util.TempFile(s.FS, "test-dir", "test-prefix") })
}

func (s *billySuite) tempFileMany(c *C, mk func() (billy.File, error)) {
	seen := map[string]bool{}
	for i := 0; i < 16; i++ {
		var fs []billy.File
		for j := 0; j < 100; j++ {
			f, err := mk()
			c.Assert(err, IsNil)
			c.Assert(seen[f.Name()], Equals, false)
			seen[f.Name()] = true
			fs = append(fs, f)
		}
		for _, f := range fs {
			c.Assert(f.Close(), IsNil)
			c.Assert(s.FS.Remove(f.Name()), IsNil)
		}
	}
	infos, err := s.FS.ReadDir("test-dir")
	c.Assert(err, IsNil)
	c.Assert(infos, HasLen, 0)
}
