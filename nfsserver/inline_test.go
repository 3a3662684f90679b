package nfsserver

import "testing"

// TestInlineCall: the calls a connection's reading goroutine may run
// itself are NFS calls that read metadata, and READs of at most 64 KiB, or
// of any size from a client that sends one call at a time; larger READs
// from other clients and READs too short to hold a count, WRITE, COMMIT,
// changes (which may delete a large file's blocks before they answer),
// MOUNT calls, replies and records too short to name a procedure go to a
// goroutine of their own.
func TestInlineCall(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rec        []byte
		want       bool
		oneAtATime bool
	}{
		{"GETATTR", callMsg(1, 2, progNFS, 3, 1, authNone, nil), true, false},
		{"LOOKUP", callMsg(1, 2, progNFS, 3, 3, authNone, nil), true, false},
		{"ACCESS", callMsg(1, 2, progNFS, 3, 4, authNone, nil), true, false},
		{"SETATTR", callMsg(1, 2, progNFS, 3, 2, authNone, nil), false, false},
		{"REMOVE", callMsg(1, 2, progNFS, 3, 12, authNone, nil), false, false},
		{"CREATE", callMsg(1, 2, progNFS, 3, 8, authNone, nil), false, false},
		{"READDIRPLUS", callMsg(1, 2, progNFS, 3, 17, authNone, nil), true, false},
		{"READ without arguments", callMsg(1, 2, progNFS, 3, 6, authNone, nil), false, false},
		{"READ of 64 KiB", callMsg(1, 2, progNFS, 3, 6, authSys(5, 5, 1, 2, 3), args(make([]byte, 37), uint64(1<<40), 64<<10)), true, false},
		{"READ of 4 KiB, no credential", callMsg(1, 2, progNFS, 3, 6, authNone, args(make([]byte, 64), uint64(0), 4096)), true, false},
		{"READ of 1 MiB", callMsg(1, 2, progNFS, 3, 6, authSys(5, 5), args(make([]byte, 36), uint64(0), 1<<20)), false, false},
		{"READ of 1 MiB, one call at a time", callMsg(1, 2, progNFS, 3, 6, authSys(5, 5), args(make([]byte, 36), uint64(0), 1<<20)), true, true},
		{"READ cut short, one call at a time", callMsg(1, 2, progNFS, 3, 6, authSys(5, 5), args(make([]byte, 36), uint64(0), 4096))[:100], false, true},
		{"WRITE, one call at a time", callMsg(1, 2, progNFS, 3, 7, authNone, nil), false, true},
		{"READ cut short", callMsg(1, 2, progNFS, 3, 6, authSys(5, 5), args(make([]byte, 36), uint64(0), 4096))[:100], false, false},
		{"READ with a handle too long", callMsg(1, 2, progNFS, 3, 6, authNone, args(make([]byte, 65), uint64(0), 4096)), false, false},
		{"WRITE", callMsg(1, 2, progNFS, 3, 7, authNone, nil), false, false},
		{"COMMIT", callMsg(1, 2, progNFS, 3, 21, authNone, nil), false, false},
		{"MNT", callMsg(1, 2, progMount, 3, 1, authNone, nil), false, false},
		{"a reply", []byte{0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 1, 0x86, 0xa3, 0, 0, 0, 3, 0, 0, 0, 1}, false, false},
		{"short", callMsg(1, 2, progNFS, 3, 1, authNone, nil)[:20], false, false},
	} {
		if got := inlineCall(tc.rec, tc.oneAtATime); got != tc.want {
			t.Errorf("%s: inlineCall %v, want %v", tc.name, got, tc.want)
		}
	}
}
