package e2e

import (
	"bytes"
	"fmt"
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
	ms := &multiServer{so: startScaleout(t, prefix)}
	for range n {
		store := newStore(t)
		mustCLI(t, store, "init", "--meta", ms.so.meta, "--blocks", ms.so.blocks, "--blocks-retry", "2s")
		ms.stores = append(ms.stores, store)
		ms.srvs = append(ms.srvs, startServer(t, store, 0))
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
