package nfsserver

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the committed seed corpus of FuzzDecodeCall")

// fixedSecret gives a store's branches a constant handle key, so seed
// inputs carry valid handles from one run to the next.
type fixedSecret struct{ *branches.Manager }

func (fixedSecret) Secret() []byte { return bytes.Repeat([]byte{0x5a}, 32) }

// fuzzSeeds returns well-formed calls of every procedure, with handles of
// s's store: the synthetic root, main's root and a file in main.
func fuzzSeeds(tb testing.TB, s *Server) [][]byte {
	rootFH := s.encodeHandle(rootHandle)
	_, info, err := s.opts.Branches.View("main")
	if err != nil {
		tb.Fatal(err)
	}
	fs, _, _ := s.opts.Branches.View("main")
	ra, err := fs.GetAttr(1)
	if err != nil {
		tb.Fatal(err)
	}
	mainFH := s.encodeHandle(fileHandle{branch: info.ID, ino: ra.Ino, gen: ra.Gen})
	fa, err := fs.Lookup(ra.Ino, "f")
	if err != nil {
		tb.Fatal(err)
	}
	fileFH := s.encodeHandle(fileHandle{branch: info.ID, ino: fa.Ino, gen: fa.Gen})
	var verf [8]byte
	setAll := sa{mode: u32p(0o644), uid: u32p(1), gid: u32p(2), size: u64p(3), atimeHow: 2, mtimeHow: 1}.enc()
	nfsArgs := [][]byte{
		nil,          // NULL
		args(fileFH), // GETATTR
		append(append(args(fileFH), setAll...), args(true, 1, 2)...), // SETATTR
		args(mainFH, "f"),                            // LOOKUP
		args(fileFH, 0x3f),                           // ACCESS
		args(fileFH),                                 // READLINK
		args(fileFH, uint64(0), 4096),                // READ
		args(fileFH, uint64(1), 3, 2, []byte("abc")), // WRITE
		append(args(mainFH, "g", 0), setAll...),      // CREATE
		append(args(mainFH, "d"), setAll...),         // MKDIR
		append(append(args(mainFH, "l"), sa{}.enc()...), args("target")...), // SYMLINK
		append(append(args(mainFH, "c", 4), sa{}.enc()...), args(1, 2)...),  // MKNOD
		args(mainFH, "g"),                        // REMOVE
		args(mainFH, "d"),                        // RMDIR
		args(mainFH, "f", mainFH, "h"),           // RENAME
		args(fileFH, mainFH, "k"),                // LINK
		args(mainFH, uint64(0), verf, 4096),      // READDIR
		args(rootFH, uint64(0), verf, 512, 4096), // READDIRPLUS
		args(mainFH),                             // FSSTAT
		args(rootFH),                             // FSINFO
		args(mainFH),                             // PATHCONF
		args(fileFH, uint64(0), 0),               // COMMIT
	}
	var seeds [][]byte
	for proc, a := range nfsArgs {
		seeds = append(seeds, callMsg(uint32(100+proc), 2, progNFS, 3, uint32(proc), authSys(1000, 1000, 4, 5), a))
	}
	for proc, a := range [][]byte{nil, args("/main"), nil, args("/main"), nil, nil} {
		seeds = append(seeds, callMsg(uint32(200+proc), 2, progMount, 3, uint32(proc), authNone, a))
	}
	seeds = append(seeds,
		callMsg(300, 2, progNFS, 4, 0, authNone, nil),
		callMsg(301, 3, progNFS, 3, 0, authNone, nil),
		callMsg(302, 2, progNFS, 3, 1, auth{flavor: 6, body: []byte{1, 2, 3, 4}}, nil),
		[]byte{0, 0, 0, 1, 0, 0, 0, 1}, // a reply, not a call
	)
	return seeds
}

// FuzzDecodeCall feeds arbitrary RPC records to the dispatcher over a real
// store: no input may panic a procedure (panics are recovered in
// production, so the fuzzer checks the panic counter), and every call gets
// a reply with its XID.
func FuzzDecodeCall(f *testing.F) {
	m := newManager(f, "")
	s, err := New(Options{Branches: fixedSecret{m}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	fs, _, _ := m.View("main")
	fa, err := fs.Create(1, "f", 0, newAttrForTest(), 0)
	if err != nil {
		f.Fatal(err)
	}
	if _, err := fs.WriteAt(fa.Ino, []byte("hello"), 0); err != nil {
		f.Fatal(err)
	}
	seeds := fuzzSeeds(f, s)
	if *updateCorpus {
		dir := filepath.Join("testdata", "fuzz", "FuzzDecodeCall")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			f.Fatal(err)
		}
		for i, seed := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", seed)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
				f.Fatal(err)
			}
		}
	}
	for _, seed := range seeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, rec []byte) {
		panics := s.metrics.panics.Load()
		reply := s.dispatch(append([]byte(nil), rec...), false, "127.0.0.1:1", nil)
		if s.metrics.panics.Load() != panics {
			t.Fatalf("a procedure panicked on %x", rec)
		}
		if len(rec) >= 8 && binary.BigEndian.Uint32(rec[4:]) == msgCall {
			if len(reply) < 12 || !bytes.Equal(reply[4:8], rec[:4]) {
				t.Fatalf("call %x got reply %x", rec, reply)
			}
		} else if reply != nil {
			t.Fatalf("non-call %x got a reply", rec)
		}
	})
}
