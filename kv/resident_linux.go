package kv

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

const trimSupported = true

// trimMapping unmaps from the process the pages of the shared mapping of a
// value log of dir that holds v (see residency for why that is safe), and
// returns the mapping's start.
func trimMapping(dir string, v []byte) (uintptr, bool) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, false
	}
	start, end, ok := vlogMapping(maps, uintptr(unsafe.Pointer(&v[0])), dir)
	if !ok {
		return 0, false
	}
	_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, start, end-start, unix.MADV_DONTNEED)
	return start, errno == 0
}

// fileResident returns the process's resident file-backed (and shared)
// memory in bytes, from /proc/self/statm; 1<<62 when it cannot be read,
// so that trims go on. The file stays open: a pread of it is one system
// call, where opening, reading and closing it each time was four (and a
// READ's share of them showed in its profile).
func fileResident() int64 {
	statm.once.Do(func() {
		statm.f, statm.err = os.Open("/proc/self/statm")
	})
	if statm.err != nil {
		return 1 << 62
	}
	var b [128]byte
	n, err := statm.f.ReadAt(b[:], 0)
	if n == 0 && err != nil {
		return 1 << 62
	}
	// "size resident shared text lib data dt", in pages: the third.
	f := bytes.Fields(b[:n])
	if len(f) < 3 {
		return 1 << 62
	}
	pages, err := strconv.ParseInt(string(f[2]), 10, 64)
	if err != nil {
		return 1 << 62
	}
	return pages * int64(os.Getpagesize())
}

// statm is /proc/self/statm, opened on first use by fileResident.
var statm struct {
	once sync.Once
	f    *os.File
	err  error
}

// vlogMapping finds, in the text of /proc/self/maps, the mapping holding
// address p, and returns its bounds if it is a shared mapping of a .vlog
// file directly in dir.
func vlogMapping(maps []byte, p uintptr, dir string) (start, end uintptr, ok bool) {
	for len(maps) > 0 {
		line := maps
		if i := bytes.IndexByte(maps, '\n'); i >= 0 {
			line, maps = maps[:i], maps[i+1:]
		} else {
			maps = nil
		}
		// start-end perms offset dev inode path
		f := strings.Fields(string(line))
		if len(f) < 6 {
			continue
		}
		dash := strings.IndexByte(f[0], '-')
		if dash < 0 {
			continue
		}
		lo, err1 := strconv.ParseUint(f[0][:dash], 16, 64)
		hi, err2 := strconv.ParseUint(f[0][dash+1:], 16, 64)
		if err1 != nil || err2 != nil || uint64(p) < lo || uint64(p) >= hi {
			continue
		}
		path := strings.Join(f[5:], " ")
		if len(f[1]) < 4 || f[1][3] != 's' || !strings.HasSuffix(path, ".vlog") || filepath.Dir(path) != dir {
			return 0, 0, false
		}
		return uintptr(lo), uintptr(hi), true
	}
	return 0, 0, false
}
