package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The README's walkthrough, step by step, as a regular user: the server,
// every CLI command and the NFS clients run as that user (uid 501 gid 20
// when the tests run as root), on a store that user creates.
func TestReadmeWalkthroughAsRegularUser(t *testing.T) {
	u := regularUser
	store := newStore(t)

	// branchnfs serve
	srv := startServer(t, store, 0)

	// branchnfs fork main try1  -> /try1
	if out := mustCLI(t, store, "fork", "main", "try1"); strings.TrimSpace(out) != "/try1" {
		t.Fatalf("fork printed %q, want /try1", out)
	}
	// branchnfs mount try1 DIR (printed: mounting is the OS's part).
	mnt := filepath.Join(userDir(t, u), "try1")
	if out := mustCLI(t, store, "mount", "try1", mnt, "--print", "--os", "darwin"); !strings.Contains(out, "/sbin/mount_nfs -o vers=3,tcp,") || !strings.Contains(out, "127.0.0.1:/try1 "+mnt) {
		t.Fatalf("mount --print: %q", out)
	}

	// echo "an idea" > idea.txt, through NFS as the user.
	mac := dialMac(t, srv.port, u)
	try1 := mac.mnt("/try1")
	fh, a, st := mac.create(try1, "idea.txt", 0o644, nil, nil)
	if st != nfsOK {
		t.Fatalf("CREATE idea.txt as uid %d: status %d", u.uid, st)
	}
	if a.uid != u.uid {
		t.Fatalf("idea.txt belongs to %d", a.uid)
	}
	if st := mac.write(fh, 0, []byte("an idea\n")); st != nfsOK {
		t.Fatalf("WRITE: %d", st)
	}
	t.Run("nfs-cp as the user", func(t *testing.T) {
		needLibnfs(t)
		src := filepath.Join(userDir(t, u), "plan.txt")
		if err := os.WriteFile(src, []byte("a plan\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := libnfsAs(t, u, "nfs-cp", src, nfsURL(srv.port, "/try1/plan.txt")); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		if _, a, st := mac.lookup(try1, "plan.txt"); st != nfsOK || a.uid != u.uid || a.size != 7 {
			t.Fatalf("plan.txt after nfs-cp: status %d, %+v", st, a)
		}
	})

	// branchnfs diff try1  -> A  file  8 B  idea.txt
	diff := mustCLI(t, store, "diff", "try1")
	if !strings.Contains(diff, "idea.txt") || !strings.Contains(diff, "8 B") {
		t.Fatalf("diff try1:\n%s", diff)
	}

	// branchnfs commit try1: main has idea.txt.
	mustCLI(t, store, "commit", "try1", "--force")
	mainFH := mac.mnt("/main")
	ifh, _, st := mac.lookup(mainFH, "idea.txt")
	if st != nfsOK {
		t.Fatalf("main lacks idea.txt after the commit: %d", st)
	}
	if b, st := mac.read(ifh); st != nfsOK || string(b) != "an idea\n" {
		t.Fatalf("main's idea.txt: %d %q", st, b)
	}

	// branchnfs fork main try2; rm -rf try2/*; branchnfs abort try2.
	mustCLI(t, store, "fork", "main", "try2")
	try2 := mac.mnt("/try2")
	for _, n := range mac.readdirplusAll(try2, 65536, nil) {
		if n == "." || n == ".." {
			continue
		}
		if st := mac.remove(try2, n); st != nfsOK {
			t.Fatalf("rm try2/%s as the user: %d", n, st)
		}
	}
	mustCLI(t, store, "abort", "try2", "--force")
	if _, _, st := mac.lookup(mainFH, "idea.txt"); st != nfsOK {
		t.Fatalf("main lost idea.txt to the aborted try2: %d", st)
	}
	if _, st := mac.getattr(try2); st != nfsStale {
		t.Fatalf("try2's root after abort: %d, want STALE", st)
	}

	// branchnfs list: main alone.
	list := mustCLI(t, store, "list")
	if !strings.Contains(list, "main") || strings.Contains(list, "try1") || strings.Contains(list, "try2") {
		t.Fatalf("list:\n%s", list)
	}

	// Stop the server; the CLI then opens the store itself, as the user.
	srv.stop(t)
	if list := mustCLI(t, store, "list", "--json"); !strings.Contains(list, `"name": "main"`) {
		t.Fatalf("list without a server:\n%s", list)
	}
	mustCLI(t, store, "fork", "main", "offline")
	mustCLI(t, store, "abort", "offline")
}

// libnfsAs runs one of nfs-cp, nfs-cat, nfs-ls as u: libnfs sends the
// process's own uid and gid (AUTH_SYS).
func libnfsAs(t *testing.T, u osUser, tool string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, args...)
	runAs(cmd, u)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
