package results_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/branchnfs/branchnfs/branches/results"
)

// BenchmarkApply plans and applies a change set of files=N new 4 KiB
// files and N modified ones to a folder of 2N files.
func BenchmarkApply(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprint("files=", n), func(b *testing.B) {
			root := b.TempDir()
			base, head := filepath.Join(root, "base"), filepath.Join(root, "head")
			data := bytes.Repeat([]byte("0123456789abcdef"), 256)
			for _, d := range []string{base, head} {
				for i := range 2 * n {
					p := filepath.Join(d, fmt.Sprintf("d%02d", i%50), fmt.Sprintf("f%05d", i))
					os.MkdirAll(filepath.Dir(p), 0o755)
					os.WriteFile(p, data, 0o644)
				}
			}
			for i := range n {
				os.WriteFile(filepath.Join(head, fmt.Sprintf("d%02d", i%50), fmt.Sprintf("f%05d", i)), append([]byte("x"), data...), 0o644)
				os.WriteFile(filepath.Join(head, fmt.Sprintf("d%02d", i%50), fmt.Sprintf("new%05d", i)), data, 0o644)
			}
			var paths []string
			for i := range 50 {
				paths = append(paths, fmt.Sprintf("d%02d", i))
			}
			deltas, err := results.Expand(results.Dir(base), results.Dir(head), paths, results.ExpandOptions{Hash: true})
			if err != nil {
				b.Fatal(err)
			}
			var meta, full bytes.Buffer
			results.WriteChangeSet(&meta, results.Dir(head), deltas, false)
			results.WriteChangeSet(&full, results.Dir(head), deltas, true)
			b.SetBytes(int64(full.Len()))
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				dir := filepath.Join(root, fmt.Sprint("copy", i))
				if out, err := exec.Command("cp", "-a", base, dir).CombinedOutput(); err != nil {
					b.Fatalf("cp: %v %s", err, out)
				}
				r, _ := os.OpenRoot(dir)
				b.StartTimer()
				var ds []results.Delta
				results.ReadChangeSet(bytes.NewReader(meta.Bytes()), func(d results.Delta, _ io.Reader) error { ds = append(ds, d); return nil })
				plan, err := results.PlanApply(r, ds, results.PlanOptions{})
				if err != nil || len(plan.Changes) != 2*n {
					b.Fatalf("plan: %v %d", err, len(plan.Changes))
				}
				err = (&results.Applier{Root: r}).Run(plan, func(fn func(d results.Delta, c io.Reader) error) error {
					return results.ReadChangeSet(bytes.NewReader(full.Bytes()), fn)
				})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				r.Close()
				os.RemoveAll(dir)
				b.StartTimer()
			}
		})
	}
}
