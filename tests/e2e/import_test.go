package e2e

import (
	"crypto/sha256"
	"fmt"
	"math/rand"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	nfs "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"
	"github.com/willscott/go-nfs-client/nfs/xdr"
)

// node is what the import test compares for every path.
type node struct {
	Type   string // file, dir, symlink
	Mode   uint32 // permission bits incl. setuid/setgid/sticky
	Size   int64
	Hash   [32]byte
	Target string
}

const importFiles = 5000

// makeImportTree writes 5,000 files in 50 directories, with symlinks,
// hard links, varied modes and sizes.
func makeImportTree(t *testing.T, root string) {
	t.Helper()
	seed := time.Now().UnixNano()
	t.Logf("tree seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	modes := []os.FileMode{0o644, 0o600, 0o755, 0o444, 0o700, 0o640, 0o664, 0o750}
	buf := make([]byte, 256<<10)
	for i := 0; i < importFiles; i++ {
		dir := filepath.Join(root, fmt.Sprintf("d%02d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		n := rng.Intn(4096)
		if i%500 == 0 {
			n = len(buf) // a few larger files
		}
		rng.Read(buf[:n])
		p := filepath.Join(dir, fmt.Sprintf("f%04d.dat", i))
		if err := os.WriteFile(p, buf[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, modes[i%len(modes)]); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ {
		var target string
		switch i % 4 {
		case 0:
			target = fmt.Sprintf("f%04d.dat", rng.Intn(100)) // sibling (may dangle)
		case 1:
			target = fmt.Sprintf("../d%02d/f%04d.dat", rng.Intn(50), rng.Intn(importFiles))
		case 2:
			target = "/etc/hostname" // absolute
		case 3:
			target = "../d07" // a directory
		}
		if err := os.Symlink(target, filepath.Join(root, fmt.Sprintf("d%02d", i%50), fmt.Sprintf("link%03d", i))); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(root, "empty"), 0o711)
	os.Mkdir(filepath.Join(root, "sticky"), 0o755)
	syscall.Chmod(filepath.Join(root, "sticky"), 0o1777)
	os.Mkdir(filepath.Join(root, "private"), 0o700)
	for i := 0; i < 5; i++ {
		if err := os.Link(filepath.Join(root, "d00", fmt.Sprintf("f%04d.dat", i)), filepath.Join(root, "private", fmt.Sprintf("hard%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "setuid"), []byte("#!/bin/sh\n"), 0o755)
	syscall.Chmod(filepath.Join(root, "setuid"), 0o4755)
}

// localTree reads the tree at root.
func localTree(t *testing.T, root string) map[string]node {
	t.Helper()
	out := map[string]node{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		n := node{Mode: uint32(st.Mode) & 0o7777}
		switch {
		case fi.Mode().IsDir():
			n.Type = "dir"
		case fi.Mode()&os.ModeSymlink != 0:
			n.Type, n.Mode = "symlink", 0
			n.Target, err = os.Readlink(p)
		default:
			n.Type = "file"
			b, rerr := os.ReadFile(p)
			n.Size, n.Hash, err = int64(len(b)), sha256.Sum256(b), rerr
		}
		out[filepath.ToSlash(rel)] = n
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// nfsTree reads the tree under handle fh through NFS.
func nfsTree(t *testing.T, c *conn, fh []byte) map[string]node {
	t.Helper()
	out := map[string]node{}
	var walk func(fh []byte, rel string)
	walk = func(fh []byte, rel string) {
		tg := c.target(t, fh)
		ents, err := tg.ReadDirPlus("/")
		if err != nil {
			t.Fatalf("READDIRPLUS %s: %v", rel, err)
		}
		for _, e := range ents {
			p := path.Join(rel, e.FileName)
			if !e.Attr.IsSet || !e.Handle.IsSet {
				t.Fatalf("%s: READDIRPLUS entry without attributes or handle", p)
			}
			a := e.Attr.Attr
			n := node{Mode: a.FileMode & 0o7777}
			switch a.Type {
			case nfs.NF3Dir:
				n.Type = "dir"
				walk(e.Handle.FH, p)
			case nfs.NF3Lnk:
				n.Type, n.Mode = "symlink", 0
				if n.Target, err = c.readlinkFH(e.Handle.FH); err != nil {
					t.Fatalf("READLINK %s: %v", p, err)
				}
			case nfs.NF3Reg:
				n.Type = "file"
				b, err := c.readFH(e.Handle.FH)
				if err != nil {
					t.Fatalf("READ %s: %v", p, err)
				}
				if uint64(len(b)) != a.Filesize {
					t.Fatalf("%s: read %d bytes, size %d", p, len(b), a.Filesize)
				}
				n.Size, n.Hash = int64(len(b)), sha256.Sum256(b)
			default:
				n.Type = fmt.Sprint("type ", a.Type)
			}
			out[p] = n
		}
	}
	walk(fh, "")
	return out
}

// readlinkFH reads a symlink by handle.
func (c *conn) readlinkFH(fh []byte) (string, error) {
	type args struct {
		rpc.Header
		FH []byte
	}
	res, err := c.c.Call(&args{rpc.Header{Rpcvers: 2, Prog: nfs.Nfs3Prog, Vers: nfs.Nfs3Vers,
		Proc: nfs.NFSProc3Readlink, Cred: auth, Verf: rpc.AuthNull}, fh})
	if err != nil {
		return "", err
	}
	stat, err := xdr.ReadUint32(res)
	if err != nil {
		return "", err
	}
	if err := nfs.NFS3Error(stat); err != nil {
		return "", err
	}
	var attr nfs.PostOpAttr
	if err := xdr.Read(res, &attr); err != nil {
		return "", err
	}
	b, err := xdr.ReadOpaque(res)
	return string(b), err
}

func compareTrees(t *testing.T, what string, want, got map[string]node) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	bad := 0
	for _, k := range keys {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: %s missing", what, k)
		} else if g != want[k] {
			t.Errorf("%s: %s:\n got %+v\nwant %+v", what, k, g, want[k])
		} else {
			continue
		}
		if bad++; bad > 20 {
			t.Fatalf("%s: too many differences", what)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected %s", what, k)
		}
	}
}

// Item 7: an import of 5,000 files with symlinks and modes reads back
// identical through NFS: every file's content hash and mode.
func TestImport5000FilesReadsBackIdentical(t *testing.T) {
	src := filepath.Join(userDir(t, regularUser), "src")
	makeImportTree(t, src)
	chownTree(t, src, regularUser) // a user imports their own tree
	want := localTree(t, src)
	files := 0
	for _, n := range want {
		if n.Type == "file" {
			files++
		}
	}
	if files < importFiles {
		t.Fatalf("source tree has %d files", files)
	}

	store := newStore(t)
	_, _, stderr := cli(t, store, "init", "--from", src)
	// 5,000 files plus setuid; the 5 extra links of private/hard* are links.
	if !strings.Contains(stderr, fmt.Sprintf("imported %d files, 53 dirs, 100 symlinks, 5 hard links", importFiles+1)) {
		t.Fatalf("init --from did not report the import: %q", stderr)
	}
	srv := startServer(t, store, 0)
	c := dial(t, srv.port)
	rootFH, err := c.mnt("/main")
	if err != nil {
		t.Fatal(err)
	}
	compareTrees(t, "go-nfs-client", want, nfsTree(t, c, rootFH))
	// Hard links stay links: same file id.
	mainT := c.target(t, rootFH)
	for i := 0; i < 5; i++ {
		a, _, err1 := mainT.Lookup(fmt.Sprintf("/d00/f%04d.dat", i))
		b, _, err2 := mainT.Lookup(fmt.Sprintf("/private/hard%d", i))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		fa, _ := a.(*nfs.Fattr)
		fb, _ := b.(*nfs.Fattr)
		if fa == nil || fb == nil || fa.Fileid != fb.Fileid || fa.Nlink != 2 {
			t.Fatalf("hard link %d: %+v vs %+v", i, fa, fb)
		}
	}
	if d := mustCLI(t, store, "list", "--json"); !strings.Contains(d, `"name": "main"`) || strings.Contains(d, ".import-") {
		t.Fatalf("list after import:\n%s", d)
	}

	t.Run("libnfs", func(t *testing.T) {
		needLibnfs(t)
		// nfs-ls -R lists every entry with its mode.
		out := mustLibnfs(t, "nfs-ls", "-R", nfsURL(srv.port, "/main"))
		listed := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 6 {
				t.Fatalf("nfs-ls line %q", line)
			}
			name := f[5]
			listed[strings.TrimPrefix(name, "/")] = f[0]
		}
		for p, n := range want {
			perm, ok := listed[p]
			if !ok {
				t.Errorf("nfs-ls -R does not list %s", p)
				continue
			}
			if n.Type == "file" && perm[1:] != os.FileMode(n.Mode & 0o777).String()[1:] {
				t.Errorf("nfs-ls: %s mode %s, want %v", p, perm, os.FileMode(n.Mode&0o777))
			}
		}
		// nfs-cat a sample of files.
		rng := rand.New(rand.NewSource(1))
		for i := 0; i < 40; i++ {
			p := fmt.Sprintf("d%02d/f%04d.dat", i, i*100+rng.Intn(100))
			got := mustLibnfs(t, "nfs-cat", nfsURL(srv.port, "/main/"+p))
			if sha256.Sum256([]byte(got)) != want[p].Hash {
				t.Errorf("nfs-cat %s: content differs", p)
			}
		}
	})
}
