package e2e

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	nfs "github.com/willscott/go-nfs-client/nfs"
)

// multiServer is several `branchnfs serve` processes, each with its own
// STORE directory, all on one etcd cluster and one bucket, as regular
// users.
type multiServer struct {
	so     *scaleout
	stores []string
	srvs   []*server
}

// startServers inits n stores on one backend and serves each.
func startServers(t *testing.T, n int, prefix string) *multiServer {
	t.Helper()
	return startServersTTL(t, n, prefix, "")
}

// startServersTTL is startServers with serve --lease-ttl ttl ("": the
// default).
func startServersTTL(t *testing.T, n int, prefix, ttl string) *multiServer {
	t.Helper()
	var extra []string
	if ttl != "" {
		extra = []string{"--lease-ttl", ttl}
	}
	ms := &multiServer{so: startScaleout(t, prefix)}
	for range n {
		store := newStore(t)
		mustCLI(t, store, "init", "--meta", ms.so.meta, "--blocks", ms.so.blocks, "--blocks-retry", "2s")
		ms.stores = append(ms.stores, store)
		ms.srvs = append(ms.srvs, startServer(t, store, 0, extra...))
	}
	return ms
}

// eventually polls cond until it returns nil, and fails the test with its
// last error after a bound far above any expected delay (a change that
// never arrives, not a slow one: latencies are logged, not asserted).
func eventually(t *testing.T, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSeveralServersRefresh runs two servers on one etcd cluster and one
// bucket: a branch forked, written and committed through server A reads
// the same through server B, without restarting B (B follows A's changes
// through a watch on the branch records); a sibling that A's commit
// invalidated, and a branch A aborted, answer NFS3ERR_STALE on B to a
// handle B handed out before.
func TestSeveralServersRefresh(t *testing.T) {
	ms := startServers(t, 2, "/multi-refresh/")
	a := ms.stores[0]
	ca, cb := dial(t, ms.srvs[0].port), dial(t, ms.srvs[1].port)

	mustCLI(t, a, "fork", "main", "b1")
	mustCLI(t, a, "fork", "main", "sib")
	data := bytes.Repeat([]byte("written on A "), 20000)
	b1, _ := ca.mount(t, "/b1")
	writeFile(t, b1, "f.bin", data)
	asib, _ := ca.mount(t, "/sib")
	writeFile(t, asib, "s.txt", []byte("sibling"))

	// B learns of the branches A forked, and reads what A wrote.
	var bsib *nfs.Target
	var sibFH []byte
	eventually(t, "sib on B", func() error {
		fh, err := cb.mnt("/sib")
		if err == nil {
			bsib, sibFH = cb.target(t, fh), fh
		}
		return err
	})
	if got := mustRead(t, bsib, "s.txt"); string(got) != "sibling" {
		t.Fatalf("sib's s.txt written on A reads %q on B", got)
	}
	bmain, _ := cb.mount(t, "/main")
	if _, err := readFile(bmain, "f.bin"); nfsStatus(err) != nfs.NFS3ErrNoEnt {
		t.Fatalf("main's f.bin on B before the commit: %v, want no such file", err)
	}

	mustCLI(t, a, "commit", "--force", "b1")
	d := eventually(t, "main's f.bin on B after the commit on A", func() error {
		got, err := readFile(bmain, "f.bin")
		if err != nil {
			return err
		}
		if !bytes.Equal(got, data) {
			return fmt.Errorf("%d bytes, want %d", len(got), len(data))
		}
		return nil
	})
	t.Logf("the commit on A showed in main on B %v after the commit command returned", d)
	d = eventually(t, "sib's handle on B after A committed its sibling", func() error {
		_, err := cb.getattr(bsib, sibFH)
		if nfsStatus(err) != nfs.NFS3ErrStale {
			return fmt.Errorf("GETATTR: %v, want NFS3ERR_STALE", err)
		}
		return nil
	})
	t.Logf("sib answered STALE on B %v after the commit command returned on A", d)

	mustCLI(t, a, "fork", "main", "gone")
	var bgone []byte
	eventually(t, "gone on B", func() error {
		fh, err := cb.mnt("/gone")
		bgone = fh
		return err
	})
	if _, err := cb.getattr(bmain, bgone); err != nil {
		t.Fatalf("GETATTR of gone's root on B: %v", err)
	}
	mustCLI(t, a, "abort", "--force", "gone")
	d = eventually(t, "gone's handle on B after A aborted it", func() error {
		_, err := cb.getattr(bmain, bgone)
		if nfsStatus(err) != nfs.NFS3ErrStale {
			return fmt.Errorf("GETATTR: %v, want NFS3ERR_STALE", err)
		}
		return nil
	})
	t.Logf("gone answered STALE on B %v after the abort command returned on A", d)
}

// TestSeveralServersOwnership runs two servers on one etcd cluster and
// one bucket, with 2 s ownership leases. A branch takes writes only
// through the server that forked it (NFS3ERR_ROFS through the other, whose
// commit of it exits 15 naming the owner); of two siblings owned by
// different servers and committed at once exactly one wins, and the
// other answers STALE on its own server; and after a SIGKILL of a server
// amid writes, another takes its branch over (refused, naming the owner,
// while it runs) and reads every acknowledged file, then writes
// and commits it.
func TestSeveralServersOwnership(t *testing.T) {
	ms := startServersTTL(t, 2, "/multi-owner/", "2s")
	a, b := ms.stores[0], ms.stores[1]
	ca, cb := dial(t, ms.srvs[0].port), dial(t, ms.srvs[1].port)

	mustCLI(t, a, "fork", "main", "sa")
	mustCLI(t, b, "fork", "main", "sb")
	asa, _ := ca.mount(t, "/sa")
	writeFile(t, asa, "s.txt", []byte("from A"))
	bsb, sbFH := cb.mount(t, "/sb")
	writeFile(t, bsb, "s.txt", []byte("from B"))
	var bsa *nfs.Target
	eventually(t, "sa on B", func() error {
		fh, err := cb.mnt("/sa")
		if err == nil {
			bsa = cb.target(t, fh)
		}
		return err
	})
	f, err := bsa.OpenFile("other.txt", 0o644)
	if err == nil {
		_, err = f.Write([]byte("x"))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	wantStatus(t, "a write to sa through B, which does not own it", err, nfs.NFS3ErrROFS)
	bmain, _ := cb.mount(t, "/main")
	_, err = bmain.OpenFile("m.txt", 0o644)
	wantStatus(t, "a create in main on a shared store", err, nfs.NFS3ErrROFS)
	code, _, stderr := cli(t, b, "commit", "--force", "sa")
	if code != 15 || !strings.Contains(stderr, a) || !strings.Contains(stderr, "takeover sa") {
		t.Fatalf("commit of sa through B: exit %d: %s; want 15 naming A's store and the takeover", code, stderr)
	}

	// Both commit at once: one wins, the other is invalidated.
	eventually(t, "sb on A", func() error { _, err := ca.mnt("/sb"); return err })
	codes := make([]int, 2)
	outs := make([]string, 2)
	var wg sync.WaitGroup
	for i, s := range []string{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _, outs[i] = cli(t, s, "commit", "--force", []string{"sa", "sb"}[i])
		}()
	}
	wg.Wait()
	if (codes[0] == 0) == (codes[1] == 0) || codes[0]+codes[1] != 6 {
		t.Fatalf("concurrent commits of sa through A and sb through B: exits %v (%q), want one 0 and one 6", codes, outs)
	}
	if codes[0] == 0 {
		// sb lost: its handle on B, its own server, answers STALE.
		_, err := cb.getattr(bsb, sbFH)
		wantStatus(t, "sb's root on B after sa won", err, nfs.NFS3ErrStale)
		eventually(t, "main's s.txt on B", func() error {
			if got, err := readFile(bmain, "s.txt"); err != nil || string(got) != "from A" {
				return fmt.Errorf("%q, %v", got, err)
			}
			return nil
		})
	} else {
		if _, err := readFile(asa, "s.txt"); nfsStatus(err) != nfs.NFS3ErrStale {
			t.Fatalf("sa on A after sb won: %v, want NFS3ERR_STALE", err)
		}
	}

	// A dies amid writes to its branch k; B takes k over.
	mustCLI(t, a, "fork", "main", "k")
	eventually(t, "k on B", func() error { _, err := cb.mnt("/k"); return err })
	code, _, stderr = cli(t, b, "takeover", "k")
	if code != 15 || !strings.Contains(stderr, a) {
		t.Fatalf("takeover of k through B while A runs: exit %d: %s; want 15 naming A", code, stderr)
	}
	code, _, stderr = cli(t, b, "takeover", "--abort", "k")
	if code != 15 || !strings.Contains(stderr, a) {
		t.Fatalf("takeover --abort of k through B while A runs: exit %d: %s; want 15 naming A", code, stderr)
	}
	wc := dial(t, ms.srvs[0].port)
	ak, _ := wc.mount(t, "/k")
	acked := map[string][]byte{}
	var mu sync.Mutex
	enough, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			name := fmt.Sprintf("w%03d.bin", i)
			p := bytes.Repeat([]byte{byte(i)}, 40<<10+i)
			f, err := ak.OpenFile(name, 0o644)
			if err != nil {
				return
			}
			if _, err := f.Write(p); err != nil {
				return
			}
			if err := f.Close(); err != nil {
				return
			}
			mu.Lock()
			acked[name] = p
			if len(acked) == 5 {
				close(enough)
			}
			mu.Unlock()
		}
	}()
	select {
	case <-enough:
	case <-done:
		t.Fatalf("writes to k on A failed with A up, after %d files", len(acked))
	}
	ms.srvs[0].kill(t)
	<-done
	d := eventually(t, "takeover of k on B", func() error {
		code, out, stderr := cli(t, b, "takeover", "--json", "k")
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, stderr)
		}
		if !strings.Contains(out, `"name": "k"`) {
			return fmt.Errorf("takeover --json printed %s", out)
		}
		return nil
	})
	t.Logf("%d files acknowledged before the SIGKILL; the takeover succeeded %v after the killed server's writes stopped (lease TTL 2 s)", len(acked), d)
	bk, _ := cb.mount(t, "/k")
	for name, want := range acked {
		if got := mustRead(t, bk, name); !bytes.Equal(got, want) {
			t.Fatalf("k/%s on B after the takeover: %d bytes, want %d", name, len(got), len(want))
		}
	}
	writeFile(t, bk, "after.txt", []byte("B owns k"))
	mustCLI(t, b, "commit", "--force", "k")
	for name, want := range acked {
		if got := mustRead(t, bmain, name); !bytes.Equal(got, want) {
			t.Fatalf("main's %s after B committed k: %d bytes, want %d", name, len(got), len(want))
		}
	}
}
