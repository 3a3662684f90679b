package txnsize_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/cowfs"
)

// bigSize is the size of the large files below: 512 blocks of 32 KiB, each
// a reference of its own, four times what one etcd transaction may delete.
const bigSize = 16 << 20

// bigFile creates name in the root of branch, bigSize bytes written 1 MiB
// per WRITE, and returns its inode.
func (e *env) bigFile(branch, name string, seed byte) cowfs.InodeID {
	e.t.Helper()
	fs := e.view(branch)
	a, err := fs.Create(cowfs.RootIno, name, cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	data := randomData(bigSize, seed)
	for off := 0; off < bigSize; off += 1 << 20 {
		if _, err := fs.WriteAt(a.Ino, data[off:off+1<<20], int64(off)); err != nil {
			e.t.Fatal(err)
		}
	}
	return a.Ino
}

func (e *env) lookup(branch string, dir cowfs.InodeID, name string) cowfs.InodeID {
	e.t.Helper()
	a, err := e.view(branch).Lookup(dir, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return a.Ino
}

func (e *env) do(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

// TestEveryOperationWithinEtcdLimits runs each NFS and branch operation at
// the sizes that stress it (a file of 512 own blocks, a branch of 300
// changed files and such a file, 1 MiB WRITEs) on a store that enforces
// etcd's default limits: every one succeeds, and its largest transaction
// fits 128 operations, 128 compares and 1.5 MiB. docs/design.md ("Scale-out
// backend") lists the figures (go test -v -run TestEveryOperation).
func TestEveryOperationWithinEtcdLimits(t *testing.T) {
	// changed gives branch 300 changed files and a large one.
	changed := func(e *env, branch string) {
		e.files(branch, "d", 300, 4096)
		e.bigFile(branch, "big", 7)
	}
	cases := []struct {
		name  string
		setup func(e *env)
		op    func(e *env)
	}{
		{"NFS WRITE of 1 MiB (wtmax) ending at the largest file size", func(e *env) {
			e.do(e.view("main").Billy().MkdirAll("x", 0o755))
		}, func(e *env) {
			fs := e.view("main")
			a, err := fs.Create(cowfs.RootIno, "sparse", cowfs.CreateGuarded, cowfs.NewAttr{Mode: 0o644}, 0)
			e.do(err)
			_, err = fs.WriteAt(a.Ino, randomData(1<<20, 1), int64(fs.MaxFileSize()-1<<20))
			e.do(err)
		}},
		{"NFS SETATTR size up, 16 MiB to the largest file size", func(e *env) { e.bigFile("main", "big", 2) }, func(e *env) {
			s := e.view("main").MaxFileSize()
			_, err := e.view("main").SetAttr(e.lookup("main", cowfs.RootIno, "big"), cowfs.SetAttr{Size: &s})
			e.do(err)
		}},
		{"NFS SETATTR size down, 16 MiB to 0", func(e *env) { e.bigFile("main", "big", 3) }, func(e *env) {
			var s uint64
			_, err := e.view("main").SetAttr(e.lookup("main", cowfs.RootIno, "big"), cowfs.SetAttr{Size: &s})
			e.do(err)
		}},
		{"NFS SETATTR size down, 16 MiB to 8 MiB + 1", func(e *env) { e.bigFile("main", "big", 4) }, func(e *env) {
			s := uint64(8<<20 + 1)
			_, err := e.view("main").SetAttr(e.lookup("main", cowfs.RootIno, "big"), cowfs.SetAttr{Size: &s})
			e.do(err)
		}},
		{"NFS REMOVE of a 16 MiB file", func(e *env) { e.bigFile("main", "big", 5) }, func(e *env) {
			e.do(e.view("main").Unlink(cowfs.RootIno, "big"))
		}},
		{"NFS RENAME over a 16 MiB file", func(e *env) {
			e.bigFile("main", "big", 6)
			e.files("main", "s", 1, 100)
		}, func(e *env) {
			s := e.lookup("main", cowfs.RootIno, "s")
			e.do(e.view("main").Rename(s, "f00000", cowfs.RootIno, "big"))
		}},
		{"NFS LINK to a 16 MiB file", func(e *env) { e.bigFile("main", "big", 8) }, func(e *env) {
			_, err := e.view("main").Link(e.lookup("main", cowfs.RootIno, "big"), cowfs.RootIno, "big2")
			e.do(err)
		}},
		{"NFS REMOVE of one of two links to a 16 MiB file", func(e *env) {
			ino := e.bigFile("main", "big", 9)
			_, err := e.view("main").Link(ino, cowfs.RootIno, "big2")
			e.do(err)
		}, func(e *env) {
			e.do(e.view("main").Unlink(cowfs.RootIno, "big"))
		}},
		{"NFS RMDIR of a directory whose 300 inherited files a branch removed", emptiedInherited, func(e *env) {
			e.do(e.view("w").Rmdir(cowfs.RootIno, "d"))
		}},
		{"NFS RENAME over such a directory", func(e *env) {
			emptiedInherited(e)
			_, err := e.view("w").Mkdir(cowfs.RootIno, "e", cowfs.NewAttr{Mode: 0o755})
			e.do(err)
		}, func(e *env) {
			e.do(e.view("w").Rename(cowfs.RootIno, "e", cowfs.RootIno, "d"))
		}},
		{"checkpoint of a branch of 300 changed files and a 16 MiB one", func(e *env) {
			e.fork("main", "w")
			changed(e, "w")
		}, func(e *env) {
			_, err := e.m.Checkpoint(ctx, "w", "cp")
			e.do(err)
		}},
		{"restore of that checkpoint", func(e *env) {
			e.fork("main", "w")
			changed(e, "w")
			_, err := e.m.Checkpoint(ctx, "w", "cp")
			e.do(err)
			e.files("w", "d", 300, 4096) // overwritten after the checkpoint
			e.do(e.view("w").Unlink(cowfs.RootIno, "big"))
		}, func(e *env) {
			e.do(e.m.Restore(ctx, "w", "cp"))
		}},
		{"fork of such a branch", func(e *env) {
			e.fork("main", "w")
			changed(e, "w")
		}, func(e *env) { e.fork("w", "w2") }},
		{"commit, fast path, of such a branch", func(e *env) {
			e.fork("main", "w")
			changed(e, "w")
		}, func(e *env) {
			if res := e.commit("w"); !res.FastPath {
				e.t.Fatal("the commit merged")
			}
		}},
		{"commit, merge, of such a branch", func(e *env) {
			e.fork("main", "w")
			changed(e, "w")
			e.files("main", "m", 1, 4096)
		}, func(e *env) {
			if res := e.commit("w"); res.FastPath {
				e.t.Fatal("the commit took the fast path")
			}
		}},
		{"abort of such a branch", func(e *env) {
			e.fork("main", "w")
			changed(e, "w")
		}, func(e *env) {
			_, err := e.m.Abort(ctx, "w")
			e.do(err)
		}},
		{"reclaim of such a branch, aborted", func(e *env) {
			e.fork("main", "w")
			changed(e, "w")
			_, err := e.m.Abort(ctx, "w")
			e.do(err)
		}, func(e *env) {
			_, err := e.m.Reclaim(ctx)
			e.do(err)
		}},
		{"fold of a layer of 300 changed files and a 16 MiB one", func(e *env) {
			// Each fork freezes main's top: ten rounds make main's stack
			// 11 deep, past FoldDepth; the last frozen layer, the one the
			// fold copies first, holds the changes.
			for r := 0; r < 10; r++ {
				if r == 9 {
					changed(e, "main")
				} else {
					e.files("main", fmt.Sprintf("r%d", r), 1, 100)
				}
				e.fork("main", fmt.Sprintf("c%d", r))
				_, err := e.m.Abort(ctx, fmt.Sprintf("c%d", r))
				e.do(err)
			}
			_, err := e.m.Reclaim(ctx)
			e.do(err)
		}, func(e *env) {
			n, err := e.m.Fold(ctx)
			e.do(err)
			if n == 0 {
				e.t.Fatal("nothing folded")
			}
		}},
	}
	var out strings.Builder
	fmt.Fprintf(&out, "| operation | txns | max writes | max compares | max bytes | etcd (128 ops, 1.5 MiB) |\n|---|---:|---:|---:|---:|---|\n")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			c.setup(e)
			s := e.measure(c.name, func() { c.op(e) })
			fmt.Fprintf(&out, "| %s | %d | %d | %d | %d | %s |\n", s.name, s.txns, s.maxWrites, s.maxCmps, s.maxBytes, s.verdict())
			if v := s.verdict(); v != "fits" {
				t.Errorf("%s: %s", c.name, v)
			}
			if s.txns == 0 {
				t.Errorf("%s committed no transaction", c.name)
			}
		})
	}
	t.Log("\n" + out.String())
}

// emptiedInherited gives branch w a directory d whose 300 files, inherited
// from main, it removed: empty in w, its entries still in main's layer.
func emptiedInherited(e *env) {
	e.files("main", "d", 300, 100)
	e.fork("main", "w")
	fs := e.view("w")
	d := e.lookup("w", cowfs.RootIno, "d")
	for i := 0; i < 300; i++ {
		e.do(fs.Unlink(d, fmt.Sprintf("f%05d", i)))
	}
}
