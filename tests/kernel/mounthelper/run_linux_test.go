package main

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestMountFlags(t *testing.T) {
	flags, data := mountFlags("vers=3,proto=tcp,nolock,nosuid,nodev,hard,addr=10.0.2.2")
	if flags != unix.MS_NOSUID|unix.MS_NODEV {
		t.Errorf("flags = %#x, want MS_NOSUID|MS_NODEV", flags)
	}
	if want := "vers=3,proto=tcp,nolock,hard,addr=10.0.2.2"; data != want {
		t.Errorf("data = %q, want %q", data, want)
	}
}
