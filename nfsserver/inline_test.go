package nfsserver

import "testing"

// TestInlineCall: the calls a connection's reading goroutine may run
// itself are NFS calls but READs and WRITEs of more than 64 KiB, which run
// there only for a client that sends one call at a time; READs and WRITEs
// too short to hold a count, MOUNT calls, replies and records too short to
// name a procedure go to a goroutine of their own.
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
		{"SETATTR", callMsg(1, 2, progNFS, 3, 2, authNone, nil), true, false},
		{"REMOVE", callMsg(1, 2, progNFS, 3, 12, authNone, nil), true, false},
		{"CREATE", callMsg(1, 2, progNFS, 3, 8, authNone, nil), true, false},
		{"READDIRPLUS", callMsg(1, 2, progNFS, 3, 17, authNone, nil), true, false},
		{"READ without arguments", callMsg(1, 2, progNFS, 3, 6, authNone, nil), false, false},
		{"READ of 64 KiB", callMsg(1, 2, progNFS, 3, 6, authSys(5, 5, 1, 2, 3), args(make([]byte, 37), uint64(1<<40), 64<<10)), true, false},
		{"READ of 4 KiB, no credential", callMsg(1, 2, progNFS, 3, 6, authNone, args(make([]byte, 64), uint64(0), 4096)), true, false},
		{"READ of 1 MiB", callMsg(1, 2, progNFS, 3, 6, authSys(5, 5), args(make([]byte, 36), uint64(0), 1<<20)), false, false},
		{"READ of 1 MiB, one call at a time", callMsg(1, 2, progNFS, 3, 6, authSys(5, 5), args(make([]byte, 36), uint64(0), 1<<20)), true, true},
		{"READ cut short, one call at a time", callMsg(1, 2, progNFS, 3, 6, authSys(5, 5), args(make([]byte, 36), uint64(0), 4096))[:100], false, true},
		{"WRITE without arguments, one call at a time", callMsg(1, 2, progNFS, 3, 7, authNone, nil), false, true},
		{"WRITE of 8 KiB", callMsg(1, 2, progNFS, 3, 7, authSys(5, 5), args(make([]byte, 36), uint64(0), 8192, 2)), true, false},
		{"WRITE of 1 MiB", callMsg(1, 2, progNFS, 3, 7, authSys(5, 5), args(make([]byte, 36), uint64(0), 1<<20, 0)), false, false},
		{"WRITE of 1 MiB, one call at a time", callMsg(1, 2, progNFS, 3, 7, authSys(5, 5), args(make([]byte, 36), uint64(0), 1<<20, 0)), true, true},
		{"READ cut short", callMsg(1, 2, progNFS, 3, 6, authSys(5, 5), args(make([]byte, 36), uint64(0), 4096))[:100], false, false},
		{"READ with a handle too long", callMsg(1, 2, progNFS, 3, 6, authNone, args(make([]byte, 65), uint64(0), 4096)), false, false},
		{"WRITE without arguments", callMsg(1, 2, progNFS, 3, 7, authNone, nil), false, false},
		{"COMMIT", callMsg(1, 2, progNFS, 3, 21, authNone, nil), true, false},
		{"MNT", callMsg(1, 2, progMount, 3, 1, authNone, nil), false, false},
		{"a reply", []byte{0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 1, 0x86, 0xa3, 0, 0, 0, 3, 0, 0, 0, 1}, false, false},
		{"short", callMsg(1, 2, progNFS, 3, 1, authNone, nil)[:20], false, false},
	} {
		if got := inlineCall(tc.rec, tc.oneAtATime); got != tc.want {
			t.Errorf("%s: inlineCall %v, want %v", tc.name, got, tc.want)
		}
	}
}
