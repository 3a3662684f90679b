package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"sort"
	"testing"
	"time"

	nfs "github.com/willscott/go-nfs-client/nfs"
)

// Item 4: a client holding handles (an open directory, a file) keeps
// working after the server is stopped and started again, and after it is
// killed with SIGKILL; data acknowledged before the kill is there.
func TestHandlesSurviveRestartAndKill(t *testing.T) {
	store := newStore(t)
	srv := startServer(t, store, 0)
	port := srv.port
	c := dial(t, port)
	mustCLI(t, store, "fork", "main", "w")
	w, root := c.mount(t, "/w")
	if _, err := w.Mkdir("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	fileFH := writeFile(t, w, "/d/f.txt", []byte("version 0"))
	_, dirFH, err := w.Lookup("/d")
	if err != nil {
		t.Fatal(err)
	}
	dir := c.target(t, dirFH) // the client's open directory

	want := map[string]string{"f.txt": "version 0"}
	for round, how := range []string{"SIGTERM", "SIGKILL"} {
		// Acknowledged writes: FILE_SYNC through a new file, and an
		// overwrite through the file handle held since the start.
		name := fmt.Sprintf("before-%s.txt", how)
		writeFile(t, dir, "/"+name, []byte("acknowledged before "+how))
		want[name] = "acknowledged before " + how
		v := fmt.Sprintf("version %d", round+1)
		if err := c.writeFH(fileFH, []byte(v)); err != nil {
			t.Fatal(err)
		}
		want["f.txt"] = v

		if how == "SIGTERM" {
			srv.stop(t)
		} else {
			srv.kill(t)
		}
		srv = startServer(t, store, port)

		// Same connection (go-nfs-client reconnects), same handles.
		if _, err := w.GetAttr(root); err != nil {
			t.Fatalf("after %s: GETATTR of the branch root handle: %v", how, err)
		}
		if _, err := w.GetAttr(dirFH); err != nil {
			t.Fatalf("after %s: GETATTR of the directory handle: %v", how, err)
		}
		got, err := c.readFH(fileFH)
		if err != nil || string(got) != want["f.txt"] {
			t.Fatalf("after %s: READ of the file handle = %q, %v; want %q", how, got, err, want["f.txt"])
		}
		ents, err := dir.ReadDirPlus("/")
		if err != nil {
			t.Fatalf("after %s: READDIRPLUS of the directory handle: %v", how, err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.FileName)
		}
		sort.Strings(names)
		var wantNames []string
		for n := range want {
			wantNames = append(wantNames, n)
		}
		sort.Strings(wantNames)
		if fmt.Sprint(names) != fmt.Sprint(wantNames) {
			t.Fatalf("after %s: directory lists %v, want %v", how, names, wantNames)
		}
		for n, content := range want {
			if got := mustRead(t, dir, "/"+n); string(got) != content {
				t.Fatalf("after %s: %s = %q, want %q", how, n, got, content)
			}
		}
		// And the handles still take writes.
		writeFile(t, dir, "/after-"+how+".txt", []byte("written after "+how))
		want["after-"+how+".txt"] = "written after " + how
	}
	if in := listBranches(t, store)["w"]; in.State != "live" {
		t.Fatalf("branch w after restarts: %+v", in)
	}
}

// Item 5: a handle of branch A with its branch id edited to B's is
// rejected, and does not reveal B's data.
func TestForgedBranchHandleRejected(t *testing.T) {
	store := newStore(t)
	srv := startServer(t, store, 0)
	c := dial(t, srv.port)
	mainT, _ := c.mount(t, "/main")
	writeFile(t, mainT, "/shared.txt", []byte("shared"))
	mustCLI(t, store, "fork", "main", "A")
	mustCLI(t, store, "fork", "main", "B")
	a, aRoot := c.mount(t, "/A")
	b, _ := c.mount(t, "/B")
	aFH := writeFile(t, a, "/shared.txt", []byte("A's copy"))
	writeFile(t, b, "/shared.txt", []byte("B's secret copy"))
	infos := listBranches(t, store)
	idA, idB := uint64(infos["A"].ID), uint64(infos["B"].ID)

	forge := func(h []byte) []byte {
		var ida, idb [8]byte
		binary.BigEndian.PutUint64(ida[:], idA)
		binary.BigEndian.PutUint64(idb[:], idB)
		i := bytes.Index(h, ida[:])
		if i < 0 {
			t.Fatalf("branch id %d not found in handle %x", idA, h)
		}
		f := append([]byte(nil), h...)
		copy(f[i:], idb[:])
		return f
	}
	for what, h := range map[string][]byte{"file": aFH, "root": aRoot} {
		// The genuine handle works, so the test can tell.
		if _, err := a.GetAttr(h); err != nil {
			t.Fatalf("genuine %s handle: %v", what, err)
		}
		f := forge(h)
		_, err := a.GetAttr(f)
		wantStatus(t, "GETATTR of forged "+what+" handle", err, nfs.NFS3ErrBadHandle)
	}
	got, err := c.readFH(forge(aFH))
	if bytes.Contains(got, []byte("secret")) {
		t.Fatal("forged handle read B's data")
	}
	wantStatus(t, "READ of forged file handle", err, nfs.NFS3ErrBadHandle)
	wantStatus(t, "WRITE through forged file handle", c.writeFH(forge(aFH), []byte("pwned")), nfs.NFS3ErrBadHandle)
	if got := mustRead(t, b, "/shared.txt"); string(got) != "B's secret copy" {
		t.Fatalf("B's file changed: %q", got)
	}
	// Truncated and bit-flipped handles are rejected too.
	for what, h := range map[string][]byte{
		"truncated": aFH[:len(aFH)-1],
		"flipped":   append(append([]byte(nil), aFH[:len(aFH)-1]...), aFH[len(aFH)-1]^1),
		"empty":     {},
	} {
		_, err := a.GetAttr(h)
		wantStatus(t, "GETATTR of "+what+" handle", err, nfs.NFS3ErrBadHandle)
	}
	if got := mustRead(t, a, "/shared.txt"); string(got) != "A's copy" {
		t.Fatalf("A's file after forgeries: %q", got)
	}
}

// garbage sends a few malformed RPC records and closes the connection.
func garbage(t *testing.T, port int) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(time.Second))
	// A last-fragment record of 12 bytes that is not an RPC call, then a
	// record marker claiming 2 GiB.
	nc.Write([]byte{0x80, 0, 0, 12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	nc.Write([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	buf := make([]byte, 512)
	nc.Read(buf) // whatever the server answers, or EOF
}
