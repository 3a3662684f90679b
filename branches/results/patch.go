package results

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
)

// contextLines is the context of each hunk, git's default.
const contextLines = 3

// binarySniff is how much of a file git reads to decide it is binary
// (a NUL byte in it).
const binarySniff = 8000

// PatchOptions tune WritePatch.
type PatchOptions struct {
	// WithGit keeps paths under .git/; by default they are left out (a
	// repository's own files are no change to its working tree).
	WithGit bool
}

// PatchStats counts what a patch holds.
type PatchStats struct {
	Files   int `json:"files"`   // diff --git sections
	Binary  int `json:"binary"`  // of them, binary patches
	Skipped int `json:"skipped"` // FIFOs, sockets and devices, which git cannot carry
}

// WritePatch writes the deltas between base and head (from Expand) to w
// as a git patch that `git apply` applies to a checkout of base: `diff
// --git` headers, new and deleted file modes, mode changes (git knows
// 644 and 755 only), symlinks (mode 120000, the target as content), text
// as unified hunks with three lines of context, and binary files (a NUL
// in their first 8000 bytes) as "GIT binary patch" literals with full
// index lines. Directories appear only through the files in them.
func WritePatch(w io.Writer, base, head Tree, deltas []Delta, o PatchOptions) (PatchStats, error) {
	bw := bufio.NewWriter(w)
	var st PatchStats
	for _, d := range deltas {
		if InGit(d.Path) && !o.WithGit {
			continue
		}
		oldG, newG := gitable(d.Old), gitable(d.New)
		if (d.Old != nil && d.Old.Type == TypeOther) || (d.New != nil && d.New.Type == TypeOther) {
			st.Skipped++
		}
		if !oldG && !newG {
			continue
		}
		var oldData, newData []byte
		var err error
		if oldG {
			if oldData, err = content(base, d.Path, d.Old); err != nil {
				return st, err
			}
		}
		if newG {
			if newData, err = content(head, d.Path, d.New); err != nil {
				return st, err
			}
		}
		if oldG && newG && (d.Old.Type == d.New.Type) {
			om, nm := gitMode(d.Old), gitMode(d.New)
			if om == nm && bytes.Equal(oldData, newData) {
				continue // mtime or a mode bit git does not keep
			}
			if err := writeFilePatch(bw, d.Path, om, nm, oldData, newData, false, false, &st); err != nil {
				return st, err
			}
			continue
		}
		// Added, deleted, or changed type: git shows a type change as a
		// deletion and an addition.
		if oldG {
			if err := writeFilePatch(bw, d.Path, gitMode(d.Old), "", oldData, nil, false, true, &st); err != nil {
				return st, err
			}
		}
		if newG {
			if err := writeFilePatch(bw, d.Path, "", gitMode(d.New), nil, newData, true, false, &st); err != nil {
				return st, err
			}
		}
	}
	return st, bw.Flush()
}

// gitable reports whether git tracks e: a file or a symlink.
func gitable(e *Entry) bool { return e != nil && (e.Type == TypeFile || e.Type == TypeSymlink) }

// gitMode is the mode git records for e.
func gitMode(e *Entry) string {
	switch {
	case e.Type == TypeSymlink:
		return "120000"
	case e.Mode&0o100 != 0:
		return "100755"
	}
	return "100644"
}

// content is what git stores for e: a file's bytes or a symlink's target.
func content(t Tree, p string, e *Entry) ([]byte, error) {
	if e.Type == TypeSymlink {
		return []byte(e.Target), nil
	}
	f, err := t.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// BlobID returns git's object id of a blob holding data.
func BlobID(data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

const zeroID = "0000000000000000000000000000000000000000"

func isBinary(data []byte) bool {
	return bytes.IndexByte(data[:min(len(data), binarySniff)], 0) >= 0
}

// writeFilePatch writes one diff --git section. oldMode is "" for an
// added path, newMode "" for a deleted one.
func writeFilePatch(w *bufio.Writer, p, oldMode, newMode string, oldData, newData []byte, added, deleted bool, st *PatchStats) error {
	st.Files++
	a, b := QuotePath("a/"+p), QuotePath("b/"+p)
	fmt.Fprintf(w, "diff --git %s %s\n", a, b)
	switch {
	case added:
		fmt.Fprintf(w, "new file mode %s\n", newMode)
	case deleted:
		fmt.Fprintf(w, "deleted file mode %s\n", oldMode)
	case oldMode != newMode:
		fmt.Fprintf(w, "old mode %s\nnew mode %s\n", oldMode, newMode)
	}
	if !added && !deleted && bytes.Equal(oldData, newData) {
		return nil // a mode change alone
	}
	oldID, newID := zeroID, zeroID
	if !added {
		oldID = BlobID(oldData)
	}
	if !deleted {
		newID = BlobID(newData)
	}
	binary := isBinary(oldData) || isBinary(newData)
	modeSuffix := ""
	if !added && !deleted && oldMode == newMode {
		modeSuffix = " " + oldMode
	}
	if binary {
		fmt.Fprintf(w, "index %s..%s%s\n", oldID, newID, modeSuffix)
		st.Binary++
		fmt.Fprintf(w, "GIT binary patch\n")
		if err := writeLiteral(w, newData); err != nil {
			return err
		}
		// The reverse hunk, as git writes it, so the patch also applies
		// with -R.
		if err := writeLiteral(w, oldData); err != nil {
			return err
		}
		return nil
	}
	fmt.Fprintf(w, "index %s..%s%s\n", oldID[:7], newID[:7], modeSuffix)
	if len(oldData) == 0 && len(newData) == 0 {
		return nil
	}
	from, to := a, b
	if added {
		from = "/dev/null"
	}
	if deleted {
		to = "/dev/null"
	}
	fmt.Fprintf(w, "--- %s\n+++ %s\n", from, to)
	writeHunks(w, splitLines(oldData), splitLines(newData))
	return nil
}

// writeLiteral writes a "literal" hunk of a git binary patch: the
// zlib-deflated data in lines of base85, each led by its byte count.
func writeLiteral(w *bufio.Writer, data []byte) error {
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	if _, err := zw.Write(data); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	fmt.Fprintf(w, "literal %d\n", len(data))
	buf := z.Bytes()
	for len(buf) > 0 {
		n := min(len(buf), 52)
		if n <= 26 {
			w.WriteByte(byte('A' + n - 1))
		} else {
			w.WriteByte(byte('a' + n - 27))
		}
		w.WriteString(encode85(buf[:n]))
		w.WriteByte('\n')
		buf = buf[n:]
	}
	w.WriteByte('\n')
	return nil
}

const alphabet85 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"

// encode85 is git's base85: big-endian groups of four bytes (the last
// padded with zeros) as five digits, most significant first.
func encode85(data []byte) string {
	out := make([]byte, 0, (len(data)+3)/4*5)
	for len(data) > 0 {
		var acc uint32
		for i := 0; i < 4; i++ {
			acc <<= 8
			if i < len(data) {
				acc |= uint32(data[i])
			}
		}
		var grp [5]byte
		for i := 4; i >= 0; i-- {
			grp[i] = alphabet85[acc%85]
			acc /= 85
		}
		out = append(out, grp[:]...)
		data = data[min(4, len(data)):]
	}
	return string(out)
}

// writeHunks writes the unified hunks turning a into b.
func writeHunks(w *bufio.Writer, a, b [][]byte) {
	ops := diffLines(a, b)
	// Indexes of changed ops, grouped into hunks whose gaps of equal
	// lines are at most 2*contextLines.
	i := 0
	for i < len(ops) {
		for i < len(ops) && ops[i].kind == opEqual {
			i++
		}
		if i == len(ops) {
			break
		}
		start := max(0, i-contextLines)
		end := i
		for {
			for end < len(ops) && ops[end].kind != opEqual {
				end++
			}
			run := end
			for run < len(ops) && ops[run].kind == opEqual {
				run++
			}
			if run < len(ops) && run-end <= 2*contextLines {
				end = run
				continue
			}
			end = min(len(ops), end+contextLines)
			break
		}
		writeHunk(w, ops[start:end], a, b)
		i = end
	}
}

func writeHunk(w *bufio.Writer, ops []lineOp, a, b [][]byte) {
	var oldStart, newStart, oldN, newN int
	oldStart, newStart = -1, -1
	for _, op := range ops {
		switch op.kind {
		case opEqual:
			oldN++
			newN++
		case opDelete:
			oldN++
		case opInsert:
			newN++
		}
		if op.kind != opInsert && oldStart < 0 {
			oldStart = op.a
		}
		if op.kind != opDelete && newStart < 0 {
			newStart = op.b
		}
	}
	// A side with no lines names the line before the hunk.
	if oldStart < 0 {
		oldStart = ops[0].a - 1
	}
	if newStart < 0 {
		newStart = ops[0].b - 1
	}
	fmt.Fprintf(w, "@@ -%s +%s @@\n", hunkRange(oldStart, oldN), hunkRange(newStart, newN))
	for _, op := range ops {
		var line []byte
		var mark byte
		switch op.kind {
		case opEqual:
			line, mark = a[op.a], ' '
		case opDelete:
			line, mark = a[op.a], '-'
		case opInsert:
			line, mark = b[op.b], '+'
		}
		w.WriteByte(mark)
		w.Write(line)
		if len(line) == 0 || line[len(line)-1] != '\n' {
			w.WriteString("\n\\ No newline at end of file\n")
		}
	}
}

// hunkRange is "start,count" with start 1-based, as diff prints it.
func hunkRange(start0, n int) string {
	if n == 1 {
		return fmt.Sprintf("%d", start0+1)
	}
	if n == 0 {
		return fmt.Sprintf("%d,0", start0+1)
	}
	return fmt.Sprintf("%d,%d", start0+1, n)
}
