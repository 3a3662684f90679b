package kv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func TestVlogMapping(t *testing.T) {
	maps := []byte(`00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/branchnfs
7f0000000000-7f0004000000 rw-s 00000000 fe:01 1234   /data/store/000001.vlog
7f0004000000-7f0008000000 rw-p 00000000 fe:01 1235   /data/store/000002.vlog
7f0008000000-7f000c000000 rw-s 00000000 fe:01 1236   /data/other/000001.vlog
7f000c000000-7f0010000000 rw-s 00000000 fe:01 1237   /data/store/00001.mem
7f0010000000-7f0014000000 rw-p 00000000 00:00 0
`)
	tests := []struct {
		p      uintptr
		ok     bool
		lo, hi uintptr
	}{
		{0x7f0000001000, true, 0x7f0000000000, 0x7f0004000000},
		{0x7f0003ffffff, true, 0x7f0000000000, 0x7f0004000000},
		{0x7f0004000000, false, 0, 0}, // private mapping
		{0x7f0008000010, false, 0, 0}, // another store
		{0x7f000c000010, false, 0, 0}, // a memtable log
		{0x7f0010000010, false, 0, 0}, // anonymous memory
		{0x1000, false, 0, 0},         // unmapped
	}
	for _, tt := range tests {
		lo, hi, ok := vlogMapping(maps, tt.p, "/data/store")
		if ok != tt.ok || lo != tt.lo || hi != tt.hi {
			t.Errorf("vlogMapping(%#x) = %#x, %#x, %v; want %#x, %#x, %v", tt.p, lo, hi, ok, tt.lo, tt.hi, tt.ok)
		}
	}
}

// vlogRSS sums the resident bytes of the process's mappings of dir's
// value logs, from /proc/self/smaps.
func vlogRSS(t *testing.T, dir string) int64 {
	t.Helper()
	dir, _ = filepath.EvalSymlinks(dir)
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var total int64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if strings.Contains(fields[0], "-") && len(fields) >= 5 {
			in = len(fields) >= 6 && strings.HasSuffix(fields[5], ".vlog") && filepath.Dir(fields[5]) == dir
			continue
		}
		if in && fields[0] == "Rss:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			total += kb << 10
		}
	}
	return total
}

// TestTrimKeepsValueLogOffRSS writes and reads back 23 MiB of values that
// go to the value log and checks that the process does not keep them
// mapped, and that every value survives the trims, before and after a
// reopen (the trims also dropped pages written but not yet synced).
func TestTrimKeepsValueLogOffRSS(t *testing.T) {
	dir := t.TempDir()
	open := func(trim int64) *badgerStore {
		st, err := OpenBadger(dir, BadgerOptions{ValueLogFileSize: 4 << 20, TrimEvery: trim, TrimAbove: -1, GCInterval: -1, Reserve: -1})
		if err != nil {
			t.Fatal(err)
		}
		return st.(*badgerStore)
	}
	st := open(3 << 20)
	ctx := context.Background()
	const n, size = 750, 32 << 10
	value := func(i int) []byte {
		b := make([]byte, size)
		r := rand.New(rand.NewPCG(uint64(i), 7))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		return b
	}
	for i := 0; i < n; i += 32 {
		if err := st.Update(ctx, func(tx Txn) error {
			for j := i; j < i+32; j++ {
				if err := tx.Set([]byte(fmt.Sprintf("v%04d", j)), value(j)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(st Store) {
		t.Helper()
		for i := 0; i < n; i++ {
			want := value(i)
			if err := st.View(ctx, func(tx Txn) error {
				return tx.GetFunc([]byte(fmt.Sprintf("v%04d", i)), func(v []byte) error {
					if !bytes.Equal(v, want) {
						return fmt.Errorf("value %d differs", i)
					}
					return nil
				})
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	check(st)
	rss := vlogRSS(t, dir)
	t.Logf("value logs resident after writing and reading %d MiB: %.1f MiB; %d trims", n*size>>20, float64(rss)/(1<<20), st.rsd.trims.Load())
	if st.rsd.trims.Load() == 0 {
		t.Errorf("no trim ran")
	}
	// Without trims every page written and read stays mapped (23 MiB);
	// without trimming the log left behind, up to a trim's worth of each
	// log stays (9 MiB here).
	if rss > 5<<20 {
		t.Errorf("value logs resident: %.1f MiB, want at most 5 MiB (about one trim's worth, 3 MiB)", float64(rss)/(1<<20))
	}
	check(st) // read again: the trimmed pages map again from the page cache
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = open(-1)
	defer st.Close()
	if st.rsd != nil {
		t.Errorf("TrimEvery -1 left trimming on")
	}
	check(st)
}

// TestNoTrimInsideUpdate: a value read back inside the transaction that
// wrote it comes from Badger's pending writes (Go memory), which a trim
// must never touch.
func TestNoTrimInsideUpdate(t *testing.T) {
	st, err := OpenBadger(t.TempDir(), BadgerOptions{ValueLogFileSize: 4 << 20, TrimEvery: 1, TrimAbove: -1, GCInterval: -1, Reserve: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	bs := st.(*badgerStore)
	big := bytes.Repeat([]byte{7}, 64<<10)
	if err := st.Update(context.Background(), func(tx Txn) error {
		if err := tx.Set([]byte("k"), big); err != nil {
			return err
		}
		return tx.GetFunc([]byte("k"), func(v []byte) error {
			if !bytes.Equal(v, big) {
				return fmt.Errorf("pending value differs")
			}
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	before := bs.rsd.trims.Load()
	if err := st.Update(context.Background(), func(tx Txn) error {
		return tx.GetFunc([]byte("k"), func([]byte) error { return nil })
	}); err != nil {
		t.Fatal(err)
	}
	if got := bs.rsd.trims.Load(); got != before {
		t.Errorf("a read inside Update trimmed (%d trims, want %d)", got, before)
	}
}

// TestTrimUnderConcurrentWrites reads values (trimming every 64 KiB) while
// other goroutines commit transactions larger than a value log (which make
// Badger grow, and maybe move, the mapping of the log it writes) and run
// value-log GC: every value read must be one that was written. (The race
// the big transactions' lock guards against, a moved mapping's addresses
// reused before a trim, is too rare to provoke here: this checks that the
// trims, the lock and GC together lose and damage nothing.)
func TestTrimUnderConcurrentWrites(t *testing.T) {
	st, err := OpenBadger(t.TempDir(), BadgerOptions{ValueLogFileSize: 1 << 20, TrimEvery: 64 << 10, TrimAbove: -1, GCInterval: -1, Reserve: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	bs := st.(*badgerStore)
	ctx := context.Background()
	const keys, size = 40, 32 << 10
	value := func(k, round int) []byte {
		b := make([]byte, size)
		r := rand.New(rand.NewPCG(uint64(k), uint64(round)))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		binary.BigEndian.PutUint32(b, uint32(round))
		return b
	}
	write := func(round int) error {
		return st.Update(ctx, func(tx Txn) error {
			for k := 0; k < keys; k++ { // 1.25 MiB: more than a value log
				if err := tx.Set([]byte(fmt.Sprintf("k%02d", k)), value(k, round)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := write(0); err != nil {
		t.Fatal(err)
	}
	const rounds = 30
	errc := make(chan error, 4)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // writer
		defer wg.Done()
		for round := 1; round <= rounds; round++ {
			if err := write(round); err != nil {
				errc <- err
				return
			}
		}
	}()
	go func() { // value-log GC
		defer wg.Done()
		for i := 0; i < rounds; i++ {
			bs.runValueLogGC(0.1) // ErrNoRewrite and the like are fine
		}
	}()
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(seed uint64) { // readers
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(seed, 1))
			for i := 0; i < 1500; i++ {
				k := rnd.IntN(keys)
				err := st.View(ctx, func(tx Txn) error {
					return tx.GetFunc([]byte(fmt.Sprintf("k%02d", k)), func(v []byte) error {
						round := int(binary.BigEndian.Uint32(v))
						if round > rounds || !bytes.Equal(v, value(k, round)) {
							return fmt.Errorf("key %d: read a value that was never written (round %d)", k, round)
						}
						return nil
					})
				})
				if err != nil {
					errc <- err
					return
				}
			}
		}(uint64(r))
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if bs.rsd.trims.Load() == 0 {
		t.Error("no trim ran")
	}
	t.Logf("%d trims", bs.rsd.trims.Load())
}

// TestFileResident checks that fileResident, which keeps /proc/self/statm
// open and reads it again each time, follows the file-backed memory the
// process maps: 8 MiB of a file mapped and touched raise it by about as
// much, and unmapping them lowers it again.
func TestFileResident(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	const size = 8 << 20
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before := fileResident()
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for i := 0; i < size; i += os.Getpagesize() {
		sum += int(m[i])
	}
	mapped := fileResident()
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	after := fileResident()
	if mapped-before < size/2 || mapped-after < size/2 {
		t.Fatalf("file-backed resident memory %d before mapping 8 MiB, %d with it touched, %d after unmapping (sum %d)", before, mapped, after, sum)
	}
}
