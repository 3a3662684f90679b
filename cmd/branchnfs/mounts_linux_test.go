package main

import (
	"strings"
	"testing"
)

func TestParseProcMounts(t *testing.T) {
	text := `proc /proc proc rw 0 0
127.0.0.1:/main /mnt/main nfs rw,vers=3,port=12049,mountport=12049 0 0
127.0.0.1:/b1 /mnt/with\040space nfs rw,vers=3,port=12049 0 0
127.0.0.1:/other /mnt/other nfs rw,vers=3,port=2049 0 0
10.0.0.1:/x /mnt/x nfs rw,port=12049 0 0
`
	got := parseProcMounts(text, 12049)
	want := []string{"127.0.0.1:/main on /mnt/main", "127.0.0.1:/b1 on /mnt/with space"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
}
