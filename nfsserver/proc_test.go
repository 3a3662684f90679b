package nfsserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	nfs "github.com/willscott/go-nfs"
	nfsc "github.com/willscott/go-nfs-client/nfs"
	"github.com/willscott/go-nfs-client/nfs/rpc"

	"github.com/branchnfs/branchnfs/cowfs"
)

// setup serves a fresh store and returns a raw client with the handle of
// /main's root.
func setup(t *testing.T) (*Server, *rawClient, []byte) {
	t.Helper()
	m := newManager(t, "")
	s, addr := startServer(t, m, nil)
	c := dialRaw(t, addr)
	return s, c, c.mnt("/main")
}

func TestGoNFSClient(t *testing.T) {
	m := newManager(t, "")
	_, addr := startServer(t, m, nil)
	rc, err := rpc.DialTCP("tcp", addr, false)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	mounter := nfsc.Mount{Client: rc}
	target, err := mounter.Mount("/main", rpc.NewAuthUnix("test", 0, 0).Auth())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := target.Mkdir("dir", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := target.OpenFile("dir/file.txt", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("branchnfs "), 300000) // 3 MB: several WRITEs
	if _, err := f.Write(payload); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil { // COMMIT
		t.Fatal(err)
	}
	rf, err := target.Open("dir/file.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rf)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("read back %d bytes, want %d", len(got), len(payload))
	}
	if err := target.Symlink("file.txt", "dir/link"); err != nil {
		t.Fatal(err)
	}
	if err := target.Rename("dir/file.txt", "dir/renamed.txt"); err != nil {
		t.Fatal(err)
	}
	ents, err := target.ReadDirPlus("dir")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if fmt.Sprint(names) != "[link renamed.txt]" { // the client hides . and ..
		t.Fatalf("ReadDirPlus = %v", names)
	}
	fi, _, err := target.Lookup("dir/renamed.txt")
	if err != nil || fi.Size() != int64(len(payload)) {
		t.Fatalf("Lookup: %v %v", fi, err)
	}
	if err := target.RemoveAll("dir"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := target.Lookup("dir"); err == nil {
		t.Fatal("dir still there after RemoveAll")
	}
	info, err := target.FSInfo()
	if err != nil || info.RTMax != maxIO || info.WTMax != maxIO || info.DTPref != dirPref || info.Size < 4<<30 {
		t.Fatalf("FSINFO %+v %v", info, err)
	}
}

func TestCreateModes(t *testing.T) {
	_, c, root := setup(t)
	k := c.as(authRoot)
	fh, a, st := k.create(root, "f", 0, sa{mode: u32p(0o640)})
	must(t, st, "create")
	if a.mode != 0o640 || a.typ != 1 || a.size != 0 {
		t.Fatalf("new file attrs %+v", a)
	}
	_, _, _, st = k.write(fh, 0, []byte("hello"), fileSync)
	must(t, st, "write")

	t.Run("unchecked keeps data", func(t *testing.T) {
		fh2, a, st := k.create(root, "f", 0, sa{mode: u32p(0o600)})
		must(t, st, "create")
		if !bytes.Equal(fh2, fh) || a.size != 5 || a.mode != 0o640 {
			t.Fatalf("UNCHECKED on existing: size %d mode %o", a.size, a.mode)
		}
	})
	t.Run("guarded exists", func(t *testing.T) {
		if _, _, st := k.create(root, "f", 1, sa{}); st != nfs.NFSStatusExist {
			t.Fatalf("GUARDED: %d", st)
		}
	})
	t.Run("unchecked size 0 truncates", func(t *testing.T) {
		_, a, st := k.create(root, "f", 0, sa{size: u64p(0)})
		must(t, st, "create")
		if a.size != 0 {
			t.Fatalf("size %d after UNCHECKED size=0", a.size)
		}
	})
	t.Run("exclusive", func(t *testing.T) {
		v1 := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
		fh1, a1, st := k.createExcl(root, "lock", v1)
		must(t, st, "exclusive create")
		// A retransmission with the same verifier succeeds: same file.
		fh2, a2, st := k.createExcl(root, "lock", v1)
		must(t, st, "exclusive retry")
		if !bytes.Equal(fh1, fh2) || a1.fileid != a2.fileid {
			t.Fatal("retry returned another file")
		}
		// Another verifier: EXIST.
		if _, _, st := k.createExcl(root, "lock", [8]byte{9}); st != nfs.NFSStatusExist {
			t.Fatalf("other verifier: %d", st)
		}
		// The client's follow-up SETATTR.
		must(t, k.setattr(fh1, sa{mode: u32p(0o644), mtimeHow: setToClientTime, mtime: [2]uint32{1000, 5}}), "setattr")
		a, _ := k.getattr(fh1)
		if a.mode != 0o644 || a.mtime != [2]uint32{1000, 5} {
			t.Fatalf("after setattr: %+v", a)
		}
	})
	t.Run("name too long", func(t *testing.T) {
		if _, _, st := k.create(root, strings.Repeat("x", 300), 1, sa{}); st != nfs.NFSStatusNameTooLong {
			t.Fatalf("300-byte name: %d", st)
		}
		if _, _, st := k.lookup(root, strings.Repeat("x", 300)); st != nfs.NFSStatusNameTooLong {
			t.Fatalf("300-byte lookup: %d", st)
		}
	})
	t.Run("bad names", func(t *testing.T) {
		for _, name := range []string{"a/b", "."} {
			if _, _, st := k.create(root, name, 1, sa{}); st == nfs.NFSStatusOk {
				t.Errorf("create %q succeeded", name)
			}
		}
	})
}

func TestLinkNlink(t *testing.T) {
	_, c, root := setup(t)
	k := c.as(authRoot)
	fh, _, st := k.create(root, "a", 1, sa{})
	must(t, st, "create")
	dfh, _, st := k.mkdir(root, "d", 0o755)
	must(t, st, "mkdir")
	post, st := k.link(fh, dfh, "b")
	must(t, st, "link")
	if post == nil || post.nlink != 2 {
		t.Fatalf("LINK post attrs %+v", post)
	}
	bfh, b, st := k.lookup(dfh, "b")
	must(t, st, "lookup")
	a, _ := k.getattr(fh)
	if a.nlink != 2 || b.nlink != 2 || a.fileid != b.fileid || !bytes.Equal(bfh, fh) {
		t.Fatalf("nlink %d/%d fileid %d/%d", a.nlink, b.nlink, a.fileid, b.fileid)
	}
	// Linking a directory is refused; an existing name gives EXIST.
	if _, st := k.link(dfh, root, "dirlink"); st != nfs.NFSStatusPerm {
		t.Errorf("link of a dir: %d", st)
	}
	if _, st := k.link(fh, root, "d"); st != nfs.NFSStatusExist {
		t.Errorf("link onto existing name: %d", st)
	}
	must(t, k.remove(root, "a"), "remove")
	if b, _ := k.getattr(bfh); b.nlink != 1 {
		t.Fatalf("nlink after remove: %d", b.nlink)
	}
}

func TestMknodAndSymlink(t *testing.T) {
	_, c, root := setup(t)
	k := c.as(authRoot)
	for _, tc := range []struct {
		name         string
		typ          uint32
		major, minor uint32
	}{{"fifo", 7, 0, 0}, {"sock", 6, 0, 0}, {"chr", 4, 1, 3}, {"blk", 3, 8, 1}} {
		_, a, st := k.mknod(root, tc.name, tc.typ, 0o640, tc.major, tc.minor)
		must(t, st, "mknod "+tc.name)
		if a.typ != tc.typ || a.mode != 0o640 || a.rdev1 != tc.major || a.rdev2 != tc.minor {
			t.Errorf("%s: %+v", tc.name, a)
		}
	}
	if _, _, st := k.mknod(root, "reg", 1, 0o644, 0, 0); st != nfs.NFSStatusBadType {
		t.Errorf("mknod REG: %d", st)
	}
	lfh, a, st := k.symlink(root, "ln", "some/where")
	must(t, st, "symlink")
	if a.typ != 5 || a.size != uint64(len("some/where")) {
		t.Errorf("symlink attrs %+v", a)
	}
	d := c.nfs(5, authRoot, args(lfh))
	must(t, status(t, d), "readlink")
	readPostOp(d)
	if got := d.string(4096); got != "some/where" {
		t.Errorf("READLINK = %q", got)
	}
	// READ of a symlink, READLINK of a file: INVAL.
	if _, _, st := k.read(lfh, 0, 10); st != nfs.NFSStatusInval {
		t.Errorf("READ symlink: %d", st)
	}
}

func TestRemoveRmdirRename(t *testing.T) {
	_, c, root := setup(t)
	k := c.as(authRoot)
	dfh, _, _ := k.mkdir(root, "d", 0o755)
	ffh, _, _ := k.create(dfh, "f", 1, sa{})
	if st := k.rmdir(root, "d"); st != nfs.NFSStatusNotEmpty {
		t.Errorf("RMDIR non-empty: %d", st)
	}
	if st := k.remove(root, "d"); st != nfs.NFSStatusIsDir {
		t.Errorf("REMOVE dir: %d", st)
	}
	if st := k.rmdir(dfh, "f"); st != nfs.NFSStatusNotDir {
		t.Errorf("RMDIR file: %d", st)
	}
	if st := k.remove(root, "missing"); st != nfs.NFSStatusNoEnt {
		t.Errorf("REMOVE missing: %d", st)
	}
	// Rename the directory: the file's handle survives.
	must(t, k.rename(root, "d", root, "e"), "rename")
	if _, st := k.getattr(ffh); st != 0 {
		t.Fatalf("handle after parent rename: %d", st)
	}
	if _, _, st := k.lookup(root, "d"); st != nfs.NFSStatusNoEnt {
		t.Errorf("old name: %d", st)
	}
	efh, _, _ := k.lookup(root, "e")
	if st := k.rename(root, "e", efh, "inside"); st != nfs.NFSStatusInval {
		t.Errorf("rename dir into itself: %d", st)
	}
	must(t, k.remove(efh, "f"), "remove")
	if _, st := k.getattr(ffh); st != nfs.NFSStatusStale {
		t.Errorf("handle of removed file: %d, want STALE", st)
	}
	must(t, k.rmdir(root, "e"), "rmdir")
}

func TestSetattr(t *testing.T) {
	_, c, root := setup(t)
	k := c.as(authRoot)
	fh, a0, _ := k.create(root, "f", 1, sa{mode: u32p(0o644)})
	// The guard must match ctime.
	bad := append(append(args(fh), sa{mode: u32p(0o600)}.enc()...), args(true, a0.ctime[0]+1, a0.ctime[1])...)
	if st := status(t, c.nfs(2, authRoot, bad)); st != nfs.NFSStatusNotSync {
		t.Fatalf("guard mismatch: %d", st)
	}
	good := append(append(args(fh), sa{mode: u32p(0o600)}.enc()...), args(true, a0.ctime[0], a0.ctime[1])...)
	must(t, status(t, c.nfs(2, authRoot, good)), "guarded setattr")
	// One that sets nothing changes nothing, the change time included.
	before, _ := k.getattr(fh)
	must(t, k.setattr(fh, sa{}), "empty setattr")
	if after, _ := k.getattr(fh); after.ctime != before.ctime || after.mode != 0o600 {
		t.Fatalf("empty setattr: ctime %v -> %v, mode %o", before.ctime, after.ctime, after.mode)
	}

	// POSIX mode bits including setuid, setgid, sticky.
	must(t, k.setattr(fh, sa{mode: u32p(0o7755)}), "chmod")
	a, _ := k.getattr(fh)
	if a.mode != 0o7755 {
		t.Fatalf("mode %o", a.mode)
	}
	// Times are separate and exact to the nanosecond.
	must(t, k.setattr(fh, sa{atimeHow: setToClientTime, atime: [2]uint32{100, 1}, mtimeHow: setToClientTime, mtime: [2]uint32{200, 999999999}}), "utimes")
	a, _ = k.getattr(fh)
	if a.atime != [2]uint32{100, 1} || a.mtime != [2]uint32{200, 999999999} || a.ctime == a.mtime {
		t.Fatalf("times a=%v m=%v c=%v", a.atime, a.mtime, a.ctime)
	}
	// Only the fields set change.
	must(t, k.setattr(fh, sa{size: u64p(12345)}), "truncate")
	a, _ = k.getattr(fh)
	if a.size != 12345 || a.mode != 0o7755 || a.atime != [2]uint32{100, 1} {
		t.Fatalf("after truncate: %+v", a)
	}
	if st := k.setattr(fh, sa{size: u64p(999999999999999)}); st != nfs.NFSStatusFBig {
		t.Fatalf("absurd truncate: %d", st)
	}
	if st := k.setattr(fh, sa{mtimeHow: setToClientTime, mtime: [2]uint32{1, 2e9}}); st != nfs.NFSStatusInval {
		t.Fatalf("bad nanoseconds: %d", st)
	}
	if st := k.setattr(root, sa{size: u64p(0)}); st != nfs.NFSStatusIsDir {
		t.Fatalf("truncate dir: %d", st)
	}
	// chown by root clears setuid and setgid of a group-executable file.
	must(t, k.setattr(fh, sa{uid: u32p(1000), gid: u32p(1000)}), "chown")
	a, _ = k.getattr(fh)
	if a.uid != 1000 || a.gid != 1000 || a.mode != 0o1755 {
		t.Fatalf("after chown: uid %d gid %d mode %o", a.uid, a.gid, a.mode)
	}
}

func TestReadWriteStability(t *testing.T) {
	s, c, root := setup(t)
	k := c.as(authRoot)
	fh, _, _ := k.create(root, "f", 1, sa{})
	n, committed, verf, st := k.write(fh, 0, []byte("unstable data"), unstable)
	must(t, st, "write")
	if n != 13 || committed != unstable || !bytes.Equal(verf, s.writeVerf[:]) {
		t.Fatalf("UNSTABLE write: n=%d committed=%d", n, committed)
	}
	for _, how := range []uint32{dataSync, fileSync} {
		_, committed, _, st = k.write(fh, 13, []byte("!"), how)
		must(t, st, "write")
		if committed != fileSync {
			t.Fatalf("stable=%d answered %d", how, committed)
		}
	}
	d := c.nfs(21, authRoot, args(fh, uint64(0), uint32(0)))
	must(t, status(t, d), "commit")
	skipWcc(d)
	if !bytes.Equal(d.fixed(8), s.writeVerf[:]) {
		t.Fatal("COMMIT verifier differs from WRITE's")
	}
	// Another server start has another verifier.
	s2, err := New(Options{Branches: s.opts.Branches})
	if err != nil {
		t.Fatal(err)
	}
	if s2.writeVerf == s.writeVerf {
		t.Fatal("write verifier did not change across server starts")
	}

	data, eof, st := k.read(fh, 0, 1000)
	must(t, st, "read")
	if string(data) != "unstable data!" || !eof {
		t.Fatalf("READ = %q eof=%v", data, eof)
	}
	// A 4 GiB READ count is clamped, not allocated.
	big := bytes.Repeat([]byte{'z'}, 3<<20)
	for off := 0; off < len(big); off += maxIO {
		_, _, _, st := k.write(fh, uint64(off), big[off:off+maxIO], unstable)
		must(t, st, "write")
	}
	data, eof, st = k.read(fh, 0, 0xffffffff)
	must(t, st, "huge read")
	if len(data) != maxIO || eof {
		t.Fatalf("READ 4 GiB: got %d bytes eof=%v", len(data), eof)
	}
	data, eof, st = k.read(fh, 1<<40, 10)
	must(t, st, "read past end")
	if len(data) != 0 || !eof {
		t.Fatal("read past end")
	}
	if _, _, _, st := k.write(fh, cowfs.DefaultMaxFileSize-2, []byte("abc"), unstable); st != nfs.NFSStatusFBig {
		t.Fatalf("write beyond max size: %d", st)
	}
	if _, _, _, st := k.write(root, 0, []byte("x"), unstable); st != nfs.NFSStatusIsDir {
		t.Fatalf("write to dir: %d", st)
	}
	if m := s.Metrics(); m.BytesWritten < 3<<20 || m.BytesRead < maxIO || m.Procedures["nfs.WRITE"] < 3 ||
		m.ProcedureMicros["nfs.WRITE"] == 0 || len(m.ProcedureMicros) != len(m.Procedures)-countPrefix(m.Procedures, "mount.") {
		t.Fatalf("metrics %+v", m)
	}
}

func TestInfoProcs(t *testing.T) {
	_, c, root := setup(t)
	d := c.nfs(19, authRoot, args(root))
	must(t, status(t, d), "fsinfo")
	readPostOp(d)
	vals := make([]uint32, 7)
	for i := range vals {
		vals[i] = d.u32()
	}
	maxSize := d.u64()
	td := [2]uint32{d.u32(), d.u32()}
	props := d.u32()
	if fmt.Sprint(vals) != fmt.Sprint([]uint32{maxIO, maxIO, 4096, maxIO, maxIO, 4096, dirPref}) ||
		maxSize < 4<<30 || td != [2]uint32{0, 1} || props != 0x1b {
		t.Fatalf("FSINFO %v max %d delta %v props %x", vals, maxSize, td, props)
	}
	d = c.nfs(20, authRoot, args(root))
	must(t, status(t, d), "pathconf")
	readPostOp(d)
	d.u32()
	if nm := d.u32(); nm != 255 {
		t.Fatalf("name_max %d", nm)
	}
	if noTrunc, chownR, ci, cp := d.bool(), d.bool(), d.bool(), d.bool(); !noTrunc || !chownR || ci || !cp {
		t.Fatal("PATHCONF flags")
	}
	d = c.nfs(18, authRoot, args(root))
	must(t, status(t, d), "fsstat")
	readPostOp(d)
	tb, fb, ab := d.u64(), d.u64(), d.u64()
	if tb == 0 || fb > tb || ab > fb {
		t.Fatalf("FSSTAT bytes %d %d %d", tb, fb, ab)
	}
}

// A slow READ does not hold up a GETATTR on the same connection.
func TestSlowReadDoesNotBlockGetattr(t *testing.T) {
	m := newManager(t, "")
	release := make(chan struct{})
	_, addr := startServer(t, m, func(s *Server) {
		s.testHook = func(prog, proc uint32) {
			if prog == progNFS && proc == 6 {
				<-release
			}
		}
	})
	t.Cleanup(func() { // before the server closes: a failed test's READ ends
		select {
		case <-release:
		default:
			close(release)
		}
	})
	c := dialRaw(t, addr)
	root := c.mnt("/main")
	k := c.as(authRoot)
	fh, _, _ := k.create(root, "f", 1, sa{})
	xid := c.nextXID()
	readCh := c.expect(xid)
	c.writeRecord(callMsg(xid, 2, progNFS, 3, 6, authRoot, args(fh, uint64(0), uint32(100))))
	within(t, "a GETATTR while a READ waits", func() {
		if _, st := k.getattr(fh); st != 0 {
			t.Error(st)
		}
	})
	close(release)
	if r := parseReply(t, c.wait(readCh)); r.stat != acceptSuccess || r.body.u32() != 0 {
		t.Fatal("READ failed")
	}
}

// TestSlowInlineCallHandsOff: a call run on the connection's reading
// goroutine (a GETATTR with nothing else in flight) that waits hands the
// reading to another goroutine, so a later call is answered meanwhile;
// the goroutine that took over hands off again when its own inline call
// waits; each waiting call still gets its reply; the watcher that hands
// off stops once no call runs; and the server closes cleanly afterwards.
func TestSlowInlineCallHandsOff(t *testing.T) {
	m := newManager(t, "")
	gates := []chan struct{}{make(chan struct{}), make(chan struct{})}
	var getattrs atomic.Int32
	armed := make(chan struct{})
	s, addr := startServer(t, m, func(s *Server) {
		s.testHook = func(prog, proc uint32) {
			if prog != progNFS || proc != 1 {
				return
			}
			select {
			case <-armed:
			default:
				return
			}
			if n := int(getattrs.Add(1)) - 1; n < len(gates) {
				<-gates[n]
			}
		}
	})
	t.Cleanup(func() { // before the server closes: a failed test's waits end
		for _, g := range gates {
			select {
			case <-g:
			default:
				close(g)
			}
		}
	})
	c := dialRaw(t, addr)
	root := c.mnt("/main")
	k := c.as(authRoot)
	k.create(root, "f", 1, sa{})
	close(armed)
	for i, gate := range gates {
		// Nothing in flight (the last reply's call has let its slot go),
		// so the GETATTR runs on the reading goroutine.
		for s.Metrics().InFlight != 0 {
			time.Sleep(time.Millisecond)
		}
		xid := c.nextXID()
		ch := c.expect(xid)
		c.writeRecord(callMsg(xid, 2, progNFS, 3, 1, authRoot, args(root)))
		for getattrs.Load() != int32(i+1) {
			time.Sleep(time.Millisecond)
		}
		within(t, "a LOOKUP while a GETATTR waits", func() {
			if _, _, st := k.lookup(root, "f"); st != 0 {
				t.Errorf("round %d: LOOKUP while a GETATTR waits: status %d", i, st)
			}
		})
		if got := s.Metrics().HandOffs; got != uint64(i+1) {
			t.Errorf("round %d: HandOffs %d, want %d", i, got, i+1)
		}
		close(gate)
		if r := parseReply(t, c.wait(ch)); r.stat != acceptSuccess || r.body.u32() != 0 {
			t.Fatalf("round %d: the GETATTR that waited failed", i)
		}
	}
	if _, st := k.getattr(root); st != 0 {
		t.Fatalf("GETATTR after the hand-offs: status %d", st)
	}
	// With no more calls, the watcher stops.
	for deadline := time.Now().Add(30 * time.Second); s.inline.running.Load(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the watcher of inline calls still runs 30 s after the last call")
		}
	}
}

// within runs fn, a call that must be answered while another waits, and
// fails the test if it takes more than 30 s (it would wait for ever).
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer in 30 s", what)
	}
}

// Handles survive server restarts on a store reopened from disk.
func TestHandlesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	var fh []byte
	{
		m, closeStore := openManager(t, dir)
		s, addr := startServer(t, m, nil)
		c := dialRaw(t, addr)
		root := c.mnt("/main")
		k := c.as(authRoot)
		dfh, _, _ := k.mkdir(root, "d", 0o755)
		fh, _, _ = k.create(dfh, "f", 1, sa{})
		_, _, _, st := k.write(fh, 0, []byte("kept"), unstable)
		must(t, st, "write")
		s.Close()
		closeStore()
	}
	m := newManager(t, dir)
	_, addr := startServer(t, m, nil)
	c := dialRaw(t, addr)
	data, _, st := c.as(authRoot).read(fh, 0, 100)
	must(t, st, "read after restart")
	if string(data) != "kept" {
		t.Fatalf("read %q", data)
	}
}

func TestServeStopsOnContext(t *testing.T) {
	m := newManager(t, "")
	s, err := New(Options{Branches: m})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Serve(ctx, ln) }()
	c := dialRaw(t, ln.Addr().String())
	c.mnt("/main")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

// countPrefix counts the keys of m that start with prefix.
func countPrefix(m map[string]uint64, prefix string) int {
	n := 0
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

// TestSlowInlineWriteHandsOff: a small FILE_SYNC WRITE that arrives with
// nothing else in flight runs on the connection's reading goroutine, as
// every call arriving alone does; when it waits (as on a slow fsync) it
// hands the reading off, so a LOOKUP sent meanwhile is answered, and the
// WRITE still succeeds and its bytes read back.
func TestSlowInlineWriteHandsOff(t *testing.T) {
	m := newManager(t, "")
	gate := make(chan struct{})
	var armed, writes atomic.Int32
	s, addr := startServer(t, m, func(s *Server) {
		s.testHook = func(prog, proc uint32) {
			if prog == progNFS && proc == 7 && armed.Load() == 1 {
				writes.Add(1)
				<-gate
			}
		}
	})
	t.Cleanup(func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	})
	c := dialRaw(t, addr)
	root := c.mnt("/main")
	k := c.as(authRoot)
	fh, _, st := k.create(root, "f", 1, sa{mode: u32p(0o644)})
	must(t, st, "create")
	armed.Store(1)
	for s.Metrics().InFlight != 0 {
		time.Sleep(time.Millisecond)
	}
	data := bytes.Repeat([]byte("inline "), 600)
	xid := c.nextXID()
	ch := c.expect(xid)
	c.writeRecord(callMsg(xid, 2, progNFS, 3, 7, authRoot, args(fh, uint64(0), uint32(len(data)), uint32(fileSync), data)))
	for writes.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	within(t, "a LOOKUP while a WRITE waits", func() {
		if _, _, st := k.lookup(root, "f"); st != 0 {
			t.Errorf("LOOKUP while a WRITE waits: status %d", st)
		}
	})
	if got := s.Metrics().HandOffs; got != 1 {
		t.Errorf("HandOffs %d, want 1 (the WRITE ran inline and was handed off)", got)
	}
	close(gate)
	if r := parseReply(t, c.wait(ch)); r.stat != acceptSuccess || r.body.u32() != 0 {
		t.Fatal("the WRITE that waited failed")
	}
	armed.Store(0)
	got, _, st := k.read(fh, 0, uint32(2*len(data)))
	must(t, st, "read")
	if !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, want the %d written", len(got), len(data))
	}
}
