package e2e

import (
	"strings"
	"testing"
)

// A branch a client has mounted is not committed or aborted by mistake:
// the CLI refuses (exit 14, naming the client) while a MNT has no UMNT,
// commits after the UMNT, and aborts a mounted branch with --force. A
// server stopped with mounts warns about them.
func TestMountedBranchRefusesCommitAndAbort(t *testing.T) {
	store := newStore(t)
	srv := startServer(t, store, 0)
	mustCLI(t, store, "fork", "main", "b1")

	mac := dialMac(t, srv.port, regularUser)
	b1 := mac.mnt("/b1")
	fh, _, st := mac.create(b1, "work.txt", 0o644, nil, nil)
	if st != nfsOK || mac.write(fh, 0, []byte("work\n")) != nfsOK {
		t.Fatalf("write in b1: %d", st)
	}
	code, _, stderr := cli(t, store, "commit", "b1")
	if code != 14 || !strings.Contains(stderr, "macbook:/b1 mounted") || !strings.Contains(stderr, "--force") {
		t.Fatalf("commit of a mounted branch: exit %d %q, want 14 naming macbook:/b1", code, stderr)
	}
	if in := listBranches(t, store)["b1"]; in.State != "live" {
		t.Fatalf("b1 is %s after a refused commit", in.State)
	}

	// UMNT, as macOS sends at unmount: the commit goes through.
	var e xdrEnc
	e.str("/b1")
	mac.call(100005, 3, 3, e.b)
	mustCLI(t, store, "commit", "b1")
	if _, _, st := mac.lookup(mac.mnt("/main"), "work.txt"); st != nfsOK {
		t.Fatalf("work.txt not in main after the commit: %d", st)
	}

	// --force aborts a branch still mounted; its handles go stale.
	mustCLI(t, store, "fork", "main", "b2")
	b2 := mac.mnt("/b2")
	if code, _, stderr := cli(t, store, "abort", "b2"); code != 14 || !strings.Contains(stderr, "b2") {
		t.Fatalf("abort of a mounted branch: exit %d %q", code, stderr)
	}
	mustCLI(t, store, "abort", "b2", "--force")
	if _, st := mac.getattr(b2); st != nfsStale {
		t.Fatalf("GETATTR in the aborted branch: %d, want STALE", st)
	}

	// Stopping the server with main still mounted warns about it.
	srv.stop(t)
	if out := srv.out.String(); !strings.Contains(out, "warning: stopping while NFS clients have mounted") || !strings.Contains(out, "macbook:/main") {
		t.Fatalf("no warning about mounted clients at shutdown:\n%s", out)
	}
}
