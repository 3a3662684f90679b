package e2e

import (
	"os"
	"strings"
	"testing"
	"time"
)

// On Linux the server serves the store owner's programs and refuses
// another local user's: a libnfs client run as another uid is closed
// before it can claim anyone's uid over AUTH_SYS.
func TestOtherUsersClientRefused(t *testing.T) {
	needLibnfs(t)
	if os.Geteuid() != 0 {
		t.Log("not root: running a client as another user needs root; only the owner's client is checked")
	}
	store := newStore(t)
	srv := startServer(t, store, 0)
	mustCLI(t, store, "fork", "main", "b")
	if out, err := libnfsAs(t, regularUser, "nfs-ls", nfsURL(srv.port, "/b")); err != nil {
		t.Fatalf("nfs-ls as the store's owner: %v %s", err, out)
	}
	if os.Geteuid() != 0 {
		return
	}
	other := osUser{uid: regularUser.uid + 1, gid: regularUser.gid, groups: []uint32{regularUser.gid}}
	if out, err := libnfsAs(t, other, "nfs-ls", nfsURL(srv.port, "/b")); err == nil {
		t.Fatalf("nfs-ls as uid %d (not the owner) was served: %s", other.uid, out)
	}
	// The server logs the refusal as it closes the connection, which may
	// be after the client has exited: wait for the line.
	refused := func(log string) bool {
		return strings.Contains(log, "connection refused") && strings.Contains(log, "only uids")
	}
	for deadline := time.Now().Add(30 * time.Second); !refused(srv.out.String()) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if log := srv.out.String(); !refused(log) {
		t.Fatalf("no log line for the refused connection:\n%s", log)
	}
}
