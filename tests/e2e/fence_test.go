package e2e

import (
	"bytes"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	nfs "github.com/willscott/go-nfs-client/nfs"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

// TestPausedOwnerIsFenced runs two servers on the 3-member etcd cluster
// with a 2 s lease. In each round A forks a branch and writes f; A is
// stopped (SIGSTOP) and, once every thread of A is stopped, a FILE_SYNC
// WRITE of f is sent to it, which waits in its socket; once A's lease expired B takes the branch over and
// writes f, acknowledged; A is resumed (SIGCONT) 0.1, 0.6 or 2 s after
// the takeover and reads its queued WRITE. That WRITE must fail
// (NFS3ERR_ROFS or NFS3ERR_STALE, after NFS3ERR_JUKEBOX while A gets a
// new lease, which a client retries), and f must keep B's acknowledged
// bytes on both servers and in main after B's commit: every write's
// transaction compares the branch's owner key to the writer's lease in
// the commit itself. Before, A answered NFS3_OK in some rounds and its
// bytes replaced B's everywhere.
func TestPausedOwnerIsFenced(t *testing.T) {
	ms := startServersTTL(t, 2, "/fence/", "2s")
	a, b := ms.stores[0], ms.stores[1]
	ca, cb := dial(t, ms.srvs[0].port), dial(t, ms.srvs[1].port)
	pid := ms.srvs[0].cmd.Process.Pid
	delays := []time.Duration{100 * time.Millisecond, 600 * time.Millisecond, 2 * time.Second}
	const perDelay = 2
	var last string
	for round := range len(delays) * perDelay {
		delay := delays[round%len(delays)]
		name := fmt.Sprintf("k%d", round)
		last = name
		size := 8<<10 + round
		first := bytes.Repeat([]byte{'a'}, size)
		late := bytes.Repeat([]byte{'A'}, size)
		fromB := bytes.Repeat([]byte{'B'}, size)

		mustCLI(t, a, "fork", "main", name)
		ak, _ := ca.mount(t, "/"+name)
		fh := writeFile(t, ak, "f", first)
		eventually(t, name+" on B", func() error { _, err := cb.mnt("/" + name); return err })

		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// kill returns before A's threads have stopped: on a busy machine
		// A could still serve the WRITE below, legitimately, as the owner.
		// It is sent once every thread is stopped, so it waits in A's
		// socket until the resume, after B's takeover.
		ranAfterKill := -1 // threads of A still running right after the kill
		eventually(t, "A stopped", func() error {
			running, err := stoppedThreads(pid)
			if ranAfterKill < 0 {
				ranAfterKill = running
			}
			if err == nil && running > 0 {
				err = fmt.Errorf("%d threads of A still run after SIGSTOP", running)
			}
			return err
		})
		resumed := false
		resume := func() {
			if !resumed {
				resumed = true
				syscall.Kill(pid, syscall.SIGCONT)
			}
		}
		t.Cleanup(resume)
		type answer struct {
			stat uint32
			err  error
		}
		queued := make(chan answer, 1)
		writeLate := func() answer {
			stat, err := testbin.WriteFH(ca.c, auth, fh, 0, late, testbin.FileSync)
			return answer{stat, err}
		}
		go func() { queued <- writeLate() }()

		// A's lease expires about 2 s after the stop.
		time.Sleep(2 * time.Second)
		for try := 0; ; try++ {
			code, _, stderr := cli(t, b, "takeover", name)
			if code == 0 {
				break
			}
			if try == 100 {
				t.Fatalf("round %d: takeover of %s on B while A is stopped: exit %d: %s", round, name, code, stderr)
			}
			time.Sleep(300 * time.Millisecond)
		}
		bk, _ := cb.mount(t, "/"+name)
		writeFile(t, bk, "f", fromB)
		time.Sleep(delay)
		resume()

		got := <-queued
		jukebox := 0
		for ; got.err == nil && got.stat == nfs3ErrJukebox; jukebox++ {
			// A is getting a new lease: a client sends the WRITE again.
			if jukebox == 300 {
				t.Fatalf("round %d: A's WRITE still answers JUKEBOX after 30 s", round)
			}
			time.Sleep(100 * time.Millisecond)
			got = writeLate()
		}
		if got.err != nil || (got.stat != nfs.NFS3ErrROFS && got.stat != nfs.NFS3ErrStale) {
			t.Fatalf("round %d (resumed %v after the takeover): A's queued WRITE answered status %d (%v), want NFS3ERR_ROFS (30) or NFS3ERR_STALE (70); %s",
				round, delay, got.stat, got.err, whoseBytes(bk, ca, fh, late, fromB))
		}
		if got := mustRead(t, bk, "f"); !bytes.Equal(got, fromB) {
			t.Fatalf("round %d (resumed %v after the takeover): f on B holds %q..., not B's acknowledged bytes", round, delay, got[:min(8, len(got))])
		}
		eventually(t, "f on A", func() error {
			got, err := ca.readFH(fh)
			if err != nil {
				return err
			}
			if !bytes.Equal(got, fromB) {
				return fmt.Errorf("f on A holds %q..., not B's acknowledged bytes", got[:min(8, len(got))])
			}
			return nil
		})
		t.Logf("round %d: A resumed %v after B's takeover; its queued WRITE answered status %d after %d JUKEBOX answers (%d threads of A still ran right after the SIGSTOP)", round, delay, got.stat, jukebox, ranAfterKill)
	}
	mustCLI(t, b, "commit", "--force", last)
	bmain, _ := cb.mount(t, "/main")
	size := 8<<10 + len(delays)*perDelay - 1
	if got := mustRead(t, bmain, "f"); !bytes.Equal(got, bytes.Repeat([]byte{'B'}, size)) {
		t.Fatalf("main's f after B committed %s: %q..., not B's acknowledged bytes", last, got[:min(8, len(got))])
	}
}

// whoseBytes says whose bytes f holds on B (through bk) and on A
// (through ca and fh): late, A's stale WRITE's, or fromB, B's
// acknowledged ones.
func whoseBytes(bk *nfs.Target, ca *conn, fh []byte, late, fromB []byte) string {
	name := func(got []byte, err error) string {
		switch {
		case err != nil:
			return err.Error()
		case bytes.Equal(got, late):
			return "A's stale bytes"
		case bytes.Equal(got, fromB):
			return "B's acknowledged bytes"
		}
		return fmt.Sprintf("%q...", got[:min(8, len(got))])
	}
	var onB []byte
	f, err := bk.Open("f")
	if err == nil {
		onB, err = io.ReadAll(f)
		f.Close()
	}
	onA, aerr := ca.readFH(fh)
	return fmt.Sprintf("f holds %s on B and %s on A", name(onB, err), name(onA, aerr))
}

// nfs3ErrJukebox is NFS3ERR_JUKEBOX, which go-nfs-client does not name.
const nfs3ErrJukebox = 10008

// TestQuorumBackNoROFS: a server's etcd cluster loses two of its three
// members for longer than the server's lease (2 s), then gets them back.
// WRITEs to the server's own branch meanwhile and right after answer
// NFS3ERR_JUKEBOX (clients retry it) or NFS3_OK, never NFS3ERR_ROFS
// (which clients take as final), while the server gets a new lease and
// claims the branch again; then they succeed, and the file holds the
// last one.
func TestQuorumBackNoROFS(t *testing.T) {
	ms := startServersTTL(t, 1, "/quorum/", "2s")
	a := ms.stores[0]
	ca := dial(t, ms.srvs[0].port)
	mustCLI(t, a, "fork", "main", "q")
	aq, _ := ca.mount(t, "/q")
	fh := writeFile(t, aq, "f", []byte("before"))
	write := func(i int) uint32 {
		stat, err := testbin.WriteFH(ca.c, auth, fh, 0, []byte(fmt.Sprintf("write %04d", i)), testbin.FileSync)
		if err != nil {
			t.Fatalf("WRITE %d: %v", i, err)
		}
		if stat != nfs.NFS3Ok && stat != nfs3ErrJukebox {
			t.Fatalf("WRITE %d to the server's own branch around an etcd quorum loss: status %d, want NFS3_OK or NFS3ERR_JUKEBOX", i, stat)
		}
		return stat
	}
	ms.so.cluster.Stop(0)
	ms.so.cluster.Stop(1)
	i := 0
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); i++ {
		write(i)
		time.Sleep(100 * time.Millisecond)
	}
	ms.so.cluster.Restart(t)
	var jukebox int
	for ; ; i++ {
		if write(i) == nfs.NFS3Ok {
			break
		}
		jukebox++
		if jukebox == 600 {
			t.Fatal("WRITEs still answer JUKEBOX 60 s after the members came back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A few more right after: the claim again must not flip them to ROFS.
	for range 20 {
		i++
		for write(i) != nfs.NFS3Ok {
			time.Sleep(100 * time.Millisecond)
		}
	}
	got, err := ca.readFH(fh)
	if err != nil || string(got) != fmt.Sprintf("write %04d", i) {
		t.Fatalf("f after the outage: %q, %v; want the last WRITE's bytes", got, err)
	}
	t.Logf("%d WRITEs; %d answered JUKEBOX after the members came back", i+1, jukebox)
}
