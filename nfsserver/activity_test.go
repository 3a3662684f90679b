package nfsserver

import (
	"sync/atomic"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
)

// countingBranches counts the activity the server reports.
type countingBranches struct {
	*branches.Manager
	n atomic.Int64
}

func (c *countingBranches) NoteActivity() { c.n.Add(1) }

// TestActivity: the calls that read or change data or names tell the
// branch store that clients work (its idle GC waits for a pause); the
// attribute, access, lookup and listing calls clients also send while
// nobody works do not.
func TestActivity(t *testing.T) {
	b := &countingBranches{Manager: newManager(t, "")}
	_, addr := startServer(t, b, nil)
	c := dialRaw(t, addr)
	root := c.mnt("/main")
	k := c.as(authRoot)
	step := func(what string, work bool, fn func()) {
		t.Helper()
		before := b.n.Load()
		fn()
		if got := b.n.Load() - before; (got > 0) != work {
			t.Errorf("%s: %d activity notes, want work=%v", what, got, work)
		}
	}
	var fh []byte
	step("CREATE", true, func() { fh, _, _ = k.create(root, "f", 1, sa{}) })
	step("WRITE", true, func() { k.write(fh, 0, []byte("hello"), unstable) })
	step("READ", true, func() { k.read(fh, 0, 5) })
	step("SETATTR", true, func() { k.setattr(fh, sa{}) })
	step("GETATTR", false, func() { k.getattr(fh) })
	step("LOOKUP", false, func() { k.lookup(root, "f") })
	step("ACCESS", false, func() { k.access(fh, 0x3f) })
	step("READDIRPLUS", false, func() { k.readdirAll(root, 8192, true) })
	step("REMOVE", true, func() { k.remove(root, "f") })
}
