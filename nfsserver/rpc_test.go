package nfsserver

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	nfs "github.com/willscott/go-nfs"

	"github.com/branchnfs/branchnfs/branches"
)

func fakeStore() *fakeBranches {
	return &fakeBranches{infos: []branches.Info{
		{ID: 1, Name: "main", State: branches.StateLive},
		{ID: 2, Name: "dead", State: branches.StateAborted},
		{ID: 3, Name: "b1", State: branches.StateLive},
	}}
}

func TestAcceptStats(t *testing.T) {
	_, addr := startServer(t, fakeStore(), nil)
	c := dialRaw(t, addr)
	tests := []struct {
		name             string
		rpcvers          uint32
		prog, vers, proc uint32
		cred             auth
		args             []byte
		denied           bool
		stat             uint32
		low, high        uint32 // for mismatches
	}{
		{name: "nfs null", rpcvers: 2, prog: progNFS, vers: 3, proc: 0, cred: authNone, stat: acceptSuccess},
		{name: "mount null", rpcvers: 2, prog: progMount, vers: 3, proc: 0, cred: authRoot, stat: acceptSuccess},
		{name: "nlm prog unavail", rpcvers: 2, prog: 100021, vers: 4, proc: 0, cred: authNone, stat: acceptProgUnavail},
		{name: "portmap prog unavail", rpcvers: 2, prog: 100000, vers: 2, proc: 3, cred: authNone, stat: acceptProgUnavail},
		{name: "nfs v4 mismatch", rpcvers: 2, prog: progNFS, vers: 4, proc: 0, cred: authNone, stat: acceptProgMismatch, low: 3, high: 3},
		{name: "nfs v2 mismatch", rpcvers: 2, prog: progNFS, vers: 2, proc: 0, cred: authNone, stat: acceptProgMismatch, low: 3, high: 3},
		{name: "mount v1 mismatch", rpcvers: 2, prog: progMount, vers: 1, proc: 0, cred: authNone, stat: acceptProgMismatch, low: 3, high: 3},
		{name: "nfs proc unavail", rpcvers: 2, prog: progNFS, vers: 3, proc: 22, cred: authNone, stat: acceptProcUnavail},
		{name: "mount proc unavail", rpcvers: 2, prog: progMount, vers: 3, proc: 6, cred: authNone, stat: acceptProcUnavail},
		{name: "getattr garbage", rpcvers: 2, prog: progNFS, vers: 3, proc: 1, cred: authNone, args: []byte{0, 0}, stat: acceptGarbageArgs},
		{name: "getattr handle too long", rpcvers: 2, prog: progNFS, vers: 3, proc: 1, cred: authNone, args: args(make([]byte, 65)), stat: acceptGarbageArgs},
		{name: "rpc version mismatch", rpcvers: 3, prog: progNFS, vers: 3, proc: 0, cred: authNone, denied: true, stat: rejectRPCMismatch, low: 2, high: 2},
		{name: "gss auth rejected", rpcvers: 2, prog: progNFS, vers: 3, proc: 0, cred: auth{flavor: 6}, denied: true, stat: rejectAuthError},
		{name: "bad auth_sys body", rpcvers: 2, prog: progNFS, vers: 3, proc: 0, cred: auth{flavor: authUnix, body: []byte{1, 2}}, denied: true, stat: rejectAuthError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			xid := c.nextXID()
			ch := c.expect(xid)
			c.writeRecord(callMsg(xid, tt.rpcvers, tt.prog, tt.vers, tt.proc, tt.cred, tt.args))
			r := parseReply(t, c.wait(ch))
			if r.xid != xid || r.denied != tt.denied || r.stat != tt.stat {
				t.Fatalf("got xid=%d denied=%v stat=%d; want xid=%d denied=%v stat=%d", r.xid, r.denied, r.stat, xid, tt.denied, tt.stat)
			}
			if tt.stat == acceptProgMismatch && !tt.denied || tt.denied && tt.stat == rejectRPCMismatch {
				low, high := r.body.u32(), r.body.u32()
				if low != tt.low || high != tt.high {
					t.Errorf("mismatch range %d..%d, want %d..%d", low, high, tt.low, tt.high)
				}
			}
			if tt.denied && tt.stat == rejectAuthError {
				if as := r.body.u32(); as != authTooWeak && as != authBadCred {
					t.Errorf("auth_stat %d", as)
				}
			}
		})
	}
	// The connection survived every bad call.
	if r := c.call(progNFS, 3, 0, authNone, nil); r.stat != acceptSuccess {
		t.Fatalf("NULL after errors: %d", r.stat)
	}
}

func TestFragmentedRecord(t *testing.T) {
	_, addr := startServer(t, fakeStore(), nil)
	c := dialRaw(t, addr)
	root := c.mnt("/")
	for _, size := range []int{1, 3, 4, 7, 16, 1000} {
		t.Run(fmt.Sprintf("fragment=%d", size), func(t *testing.T) {
			xid := c.nextXID()
			ch := c.expect(xid)
			c.writeFragments(callMsg(xid, 2, progNFS, 3, 1, authRoot, args(root)), size)
			r := parseReply(t, c.wait(ch))
			if r.stat != acceptSuccess {
				t.Fatalf("stat %d", r.stat)
			}
			if st := r.body.u32(); st != 0 {
				t.Fatalf("GETATTR status %d", st)
			}
			if a := readFattr(r.body); a.fileid != 1 || a.typ != 2 {
				t.Fatalf("root attrs %+v", a)
			}
		})
	}
}

func TestOversizedRecordAndHugeLengths(t *testing.T) {
	s, addr := startServer(t, fakeStore(), nil)
	c := dialRaw(t, addr)
	root := c.mnt("/")

	// A WRITE claiming 4 GiB of data in a small record: GARBAGE_ARGS.
	var e encoder
	e.opaque(root)
	e.u64(0)
	e.u32(0xffffffff)
	e.u32(0)
	e.u32(0xffffffff) // data length
	e.fixed([]byte("tiny"))
	if r := c.call(progNFS, 3, 7, authRoot, e.b); r.stat != acceptGarbageArgs {
		t.Fatalf("4 GiB WRITE: stat %d, want GARBAGE_ARGS", r.stat)
	}

	// A record larger than the server accepts is discarded unread and
	// answered GARBAGE_ARGS; the connection goes on.
	big := bytes.Repeat([]byte{0xab}, maxRecord+100)
	xid := c.nextXID()
	ch := c.expect(xid)
	msg := callMsg(xid, 2, progNFS, 3, 7, authRoot, big)
	c.writeFragments(msg, 1<<20)
	if r := parseReply(t, c.wait(ch)); r.stat != acceptGarbageArgs {
		t.Fatalf("oversized record: stat %d", r.stat)
	}
	if r := c.call(progNFS, 3, 0, authNone, nil); r.stat != acceptSuccess {
		t.Fatalf("NULL after oversized record: %d", r.stat)
	}
	if g := s.Metrics().GarbageArgs; g < 2 {
		t.Errorf("GarbageArgs = %d, want >= 2", g)
	}
}

func TestConcurrentRepliesByXID(t *testing.T) {
	release := make(chan struct{})
	_, addr := startServer(t, fakeStore(), func(s *Server) {
		s.testHook = func(prog, proc uint32) {
			if prog == progNFS && proc == 1 { // GETATTR waits for the NULLs
				<-release
			}
		}
	})
	c := dialRaw(t, addr)
	root := c.mnt("/")

	// 16 GETATTRs that block in the server, then 16 NULLs, all written
	// down one connection before any reply is read.
	const n = 32
	xids := make([]uint32, n)
	chans := make([]chan []byte, n)
	var batch []byte
	for i := range n {
		xids[i] = c.nextXID()
		chans[i] = c.expect(xids[i])
		proc, a := uint32(0), []byte(nil)
		if i < n/2 {
			proc, a = 1, args(root)
		}
		msg := callMsg(xids[i], 2, progNFS, 3, proc, authRoot, a)
		batch = binary32(batch, uint32(len(msg))|0x80000000)
		batch = append(batch, msg...)
	}
	c.wmu.Lock()
	c.nc.Write(batch)
	c.wmu.Unlock()

	// The NULLs complete while every GETATTR is still in flight.
	for i := n / 2; i < n; i++ {
		r := parseReply(t, c.wait(chans[i]))
		if r.xid != xids[i] || r.stat != acceptSuccess || len(r.body.b) != 0 {
			t.Fatalf("NULL %d: xid %d stat %d body %d bytes", i, r.xid, r.stat, len(r.body.b))
		}
	}
	close(release)
	for i := range n / 2 {
		r := parseReply(t, c.wait(chans[i]))
		if r.xid != xids[i] || r.stat != acceptSuccess {
			t.Fatalf("GETATTR %d: xid %d stat %d", i, r.xid, r.stat)
		}
		if st := r.body.u32(); st != 0 {
			t.Fatalf("GETATTR status %d", st)
		}
		if a := readFattr(r.body); a.fileid != 1 {
			t.Fatalf("GETATTR %d: fileid %d", i, a.fileid)
		}
	}
	c.mu.Lock()
	order := append([]uint32(nil), c.order...)
	c.mu.Unlock()
	// Replies arrived out of request order: the first NULL before the
	// first GETATTR.
	pos := map[uint32]int{}
	for i, x := range order {
		pos[x] = i
	}
	if pos[xids[n/2]] > pos[xids[0]] {
		t.Errorf("replies came in request order; want the NULLs first")
	}
}

func binary32(b []byte, v uint32) []byte {
	var e encoder
	e.b = b
	e.u32(v)
	return e.b
}

func TestPanicRecovered(t *testing.T) {
	s, addr := startServer(t, fakeStore(), func(s *Server) {
		s.testHook = func(prog, proc uint32) {
			if prog == progNFS && proc == 19 { // FSINFO
				panic("injected")
			}
		}
	})
	c := dialRaw(t, addr)
	root := c.mnt("/")
	if r := c.call(progNFS, 3, 19, authRoot, args(root)); r.stat != acceptSystemErr {
		t.Fatalf("panicking FSINFO: stat %d, want SYSTEM_ERR", r.stat)
	}
	d := c.nfs(1, authRoot, args(root))
	if st := d.u32(); st != 0 {
		t.Fatalf("GETATTR after panic: %d", st)
	}
	if p := s.Metrics().Panics; p != 1 {
		t.Errorf("Panics = %d, want 1", p)
	}
}

func TestForgedHandles(t *testing.T) {
	_, addr := startServer(t, fakeStore(), nil)
	c := dialRaw(t, addr)
	root := c.mnt("/")
	edit := func(f func(h []byte) []byte) []byte {
		return f(append([]byte(nil), root...))
	}
	other, _ := New(Options{Branches: &otherSecret{fakeStore()}})
	cases := map[string][]byte{
		"branch id edited": edit(func(h []byte) []byte { h[11] = 3; return h }),
		"inode edited":     edit(func(h []byte) []byte { h[19]++; return h }),
		"mac edited":       edit(func(h []byte) []byte { h[40] ^= 1; return h }),
		"flags edited":     edit(func(h []byte) []byte { h[1] = 0; return h }),
		"truncated":        root[:40],
		"empty":            {},
		"64 bytes":         append(edit(func(h []byte) []byte { return h }), make([]byte, 20)...),
		"other secret":     other.encodeHandle(fileHandle{viaRoot: true, branch: 1, ino: 1}),
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			d := c.nfs(1, authRoot, args(h))
			if st := d.u32(); st != uint32(nfs.NFSStatusBadHandle) {
				t.Fatalf("status %d, want BADHANDLE", st)
			}
		})
	}
}

type otherSecret struct{ *fakeBranches }

func (o *otherSecret) Secret() []byte { return bytes.Repeat([]byte{9}, 32) }

func TestMountProtocol(t *testing.T) {
	_, addr := startServer(t, fakeStore(), nil)
	c := dialRaw(t, addr)

	// MNT "/" offers AUTH_SYS first, then AUTH_NULL.
	d := c.mount(1, args("/"))
	if st := d.u32(); st != 0 {
		t.Fatalf("MNT /: %d", st)
	}
	d.opaque(fhSize)
	if n := d.u32(); n != 2 || d.u32() != authUnix || d.u32() != authNull {
		t.Fatalf("auth flavors: %d", n)
	}
	for _, p := range []string{"/nope", "/dead", "nope/x"} {
		if st := c.mount(1, args(p)).u32(); st != 2 {
			t.Errorf("MNT %q: status %d, want MNT3ERR_NOENT", p, st)
		}
	}

	// EXPORT: "/" and every live branch.
	d = c.mount(5, nil)
	var exports []string
	for d.bool() {
		exports = append(exports, d.string(1024))
		for d.bool() {
			d.string(1024)
		}
	}
	if d.err != nil || fmt.Sprint(exports) != "[/ /main /b1]" {
		t.Fatalf("EXPORT = %v (%v)", exports, d.err)
	}

	dump := func() []string {
		d := c.mount(2, nil)
		var out []string
		for d.bool() {
			out = append(out, d.string(1024)+":"+d.string(1024))
		}
		return out
	}
	if got := fmt.Sprint(dump()); got != "[testhost:/]" {
		t.Fatalf("DUMP = %s", got)
	}
	if r := c.call(progMount, 3, 3, authRoot, args("/")); r.stat != acceptSuccess || len(r.body.b) != 0 {
		t.Fatalf("UMNT: %d", r.stat)
	}
	if got := dump(); len(got) != 0 {
		t.Fatalf("DUMP after UMNT = %v", got)
	}
	c.mnt("/")
	if r := c.call(progMount, 3, 4, authRoot, nil); r.stat != acceptSuccess {
		t.Fatalf("UMNTALL: %d", r.stat)
	}
	if got := dump(); len(got) != 0 {
		t.Fatalf("DUMP after UMNTALL = %v", got)
	}
}

func TestRootExportListing(t *testing.T) {
	_, addr := startServer(t, fakeStore(), nil)
	c := dialRaw(t, addr)
	root := c.mnt("/")
	var verf [8]byte
	d := c.nfs(16, authRoot, args(root, uint64(0), verf, 4096))
	if st := d.u32(); st != 0 {
		t.Fatalf("READDIR: %d", st)
	}
	readPostOp(d)
	d.fixed(8)
	var names []string
	var fileids []uint64
	for d.bool() {
		fileids = append(fileids, d.u64())
		names = append(names, d.string(255))
		d.u64()
	}
	if !d.bool() || d.err != nil {
		t.Fatal("READDIR of root not at eof")
	}
	if fmt.Sprint(names) != "[. .. main b1]" {
		t.Fatalf("root lists %v", names)
	}
	if fileids[2] == fileids[3] || fileids[2] == 1 {
		t.Fatalf("branch fileids %v", fileids)
	}
	// The root is read-only for everyone, root included.
	d = c.nfs(9, authRoot, args(root, "newbranch", false, false, false, false, 0, 0))
	if st := d.u32(); st != uint32(nfs.NFSStatusAccess) {
		t.Fatalf("MKDIR in root: %d", st)
	}
}

// Many clients at once: no reply is lost or mismatched.
func TestManyConnections(t *testing.T) {
	_, addr := startServer(t, fakeStore(), nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dialRaw(t, addr)
			root := c.mnt("/")
			for range 50 {
				d := c.nfs(1, authRoot, args(root))
				if d.u32() != 0 {
					t.Error("GETATTR failed")
					return
				}
			}
		}()
	}
	wg.Wait()
}
