package branchops

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/branchnfs/branchnfs/bench/workload"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
)

// The churn workloads measure what the server gives back by itself: after
// their rounds the store stays open and idle for ChurnIdle, with the
// background reclaimer and its garbage collection on their defaults, and
// is then synced, closed and measured, with no explicit GC.
//   - CHURN: ChurnRounds rounds of fork → rewrite big.bin whole with new
//     bytes → commit. Target: the store at most 1.5 × the live data.
//   - ABORTCHURN: ChurnRounds rounds of fork → write a new 32 MiB file →
//     abort. Target: at most 5 MiB added.

// ChurnRounds and ChurnIdle shape the churn workloads.
var (
	ChurnRounds = 10
	ChurnIdle   = 20 * time.Second
)

// isChurn reports whether workload is measured after an idle period
// rather than after an explicit GC.
func isChurn(workload string) bool { return workload == "CHURN" || workload == "ABORTCHURN" }

// churn runs the rounds of CHURN (abort false) or ABORTCHURN and returns
// what big.bin must hold afterwards.
func churn(ctx context.Context, m *branches.Manager, abort bool, data []byte) ([]byte, error) {
	want := data
	for i := 1; i <= ChurnRounds; i++ {
		name := fmt.Sprintf("churn%d", i)
		if _, err := m.Fork(ctx, "main", name); err != nil {
			return nil, err
		}
		fresh := workload.Data(uint64(1000+i), len(data))
		if abort {
			if _, err := WriteFile(m, name, cowfs.RootIno, "new.bin", fresh); err != nil {
				return nil, err
			}
			if _, err := m.Abort(ctx, name); err != nil {
				return nil, err
			}
			continue
		}
		if _, err := WriteFile(m, name, cowfs.RootIno, "big.bin", fresh); err != nil {
			return nil, err
		}
		if _, err := m.Commit(ctx, name); err != nil {
			return nil, err
		}
		want = fresh
	}
	return want, nil
}

// settleIdle leaves the store open and idle for ChurnIdle (the background
// reclaimer does what it does by itself), then syncs and closes it and
// returns its size on disk and Badger's own estimate.
func settleIdle(ctx context.Context, s *Store) (int64, int64, error) {
	select {
	case <-ctx.Done():
		s.Close()
		return 0, 0, ctx.Err()
	case <-time.After(ChurnIdle):
	}
	if err := s.KV.Sync(ctx); err != nil {
		s.Close()
		return 0, 0, err
	}
	kvs, _ := s.KV.Size()
	if err := s.Close(); err != nil {
		return 0, 0, err
	}
	du, err := DirSize(s.Dir)
	return du, kvs, err
}

// edit16Content is what big.bin holds after EDIT16.
func edit16Content(data []byte) []byte {
	p := bytes.Clone(data)
	for i := 0; i < 16; i++ {
		off := (uint64(i+1) * 2654435761) % (1<<25 - 10)
		copy(p[off:], fmt.Sprintf("MARKER%04d", i))
	}
	return p
}

// verifyFile reopens the store in dir and checks that main's big.bin
// hashes (SHA-256) as want does.
func verifyFile(ctx context.Context, dir, workload string, want []byte) error {
	if want == nil {
		return fmt.Errorf("workload %s sets no expected content of big.bin: set want in Growth's switch", workload)
	}
	s, err := Open(ctx, dir)
	if err != nil {
		return err
	}
	defer s.Close()
	v, _, err := s.M.View("main")
	if err != nil {
		return err
	}
	a, err := v.Lookup(cowfs.RootIno, "big.bin")
	if err != nil {
		return fmt.Errorf("%s: big.bin after the workload: %w", workload, err)
	}
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for off := int64(0); ; {
		n, eof, err := v.ReadAt(a.Ino, buf, off)
		if err != nil {
			return fmt.Errorf("%s: read big.bin at %d: %w", workload, off, err)
		}
		h.Write(buf[:n])
		off += int64(n)
		if eof || n == 0 {
			break
		}
	}
	if got, exp := h.Sum(nil), sha256.Sum256(want); !bytes.Equal(got, exp[:]) {
		return fmt.Errorf("%s: big.bin hashes %x after the workload, want %x (%d bytes)", workload, got[:8], exp[:8], len(want))
	}
	return nil
}
