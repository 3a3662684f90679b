package results

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// A change set carries deltas from a store to whoever applies them
// (apply, possibly through the control API): a tar stream with one
// regular-file record per delta, named by its path, whose PAX records
// hold the delta's old and new entries as JSON, and whose content is the
// new file's bytes when the set was written with content.
const (
	paxOld = "BRANCHNFS.old"
	paxNew = "BRANCHNFS.new"
)

// WriteChangeSet writes deltas (from Expand, with Hash) to w as a change
// set, with the head's content of every new file when content is set.
// A file whose size changed since Expand read it fails the write.
func WriteChangeSet(w io.Writer, head Tree, deltas []Delta, content bool) error {
	tw := tar.NewWriter(w)
	for _, d := range deltas {
		hdr := &tar.Header{Name: d.Path, Typeflag: tar.TypeReg, Mode: 0o600, Format: tar.FormatPAX,
			ModTime: time.Unix(0, 0), PAXRecords: map[string]string{}}
		for key, e := range map[string]*Entry{paxOld: d.Old, paxNew: d.New} {
			if e == nil {
				continue
			}
			b, err := json.Marshal(e)
			if err != nil {
				return err
			}
			hdr.PAXRecords[key] = string(b)
		}
		withData := content && d.New != nil && d.New.Type == TypeFile
		if withData {
			hdr.Size = d.New.Size
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if withData {
			if err := copyFile(tw, head, d.Path, d.New.Size); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// copyFile copies exactly size bytes of file p of t to w.
func copyFile(w io.Writer, t Tree, p string, size int64) error {
	f, err := t.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.CopyN(w, f, size)
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("results: %s shrank to %d bytes while it was read (it is being written): retry", p, n)
	}
	return err
}

// ReadChangeSet reads a change set from r and calls fn for each delta
// in order, with the new content when the set carries it (else nil). fn
// must read content before it returns.
func ReadChangeSet(r io.Reader, fn func(d Delta, content io.Reader) error) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadChangeSet, err)
		}
		d := Delta{Path: hdr.Name}
		for key, dst := range map[string]**Entry{paxOld: &d.Old, paxNew: &d.New} {
			v, ok := hdr.PAXRecords[key]
			if !ok {
				continue
			}
			*dst = new(Entry)
			if err := json.Unmarshal([]byte(v), *dst); err != nil {
				return fmt.Errorf("%w: %s: %v", ErrBadChangeSet, hdr.Name, err)
			}
		}
		if d.Old == nil && d.New == nil {
			return fmt.Errorf("%w: %s has neither an old nor a new entry", ErrBadChangeSet, hdr.Name)
		}
		var content io.Reader
		if hdr.Size > 0 || (d.New != nil && d.New.Type == TypeFile && d.New.Size == 0 && hdr.Size == 0) {
			content = tr
		}
		if err := fn(d, content); err != nil {
			return err
		}
	}
}

// HashingReader hashes what is read through it.
type HashingReader struct {
	r io.Reader
	h hashState
}

type hashState interface {
	io.Writer
	Sum([]byte) []byte
}

// NewHashingReader returns a reader of r that hashes with SHA-256.
func NewHashingReader(r io.Reader) *HashingReader { return &HashingReader{r: r, h: sha256.New()} }

func (h *HashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	return n, err
}

// SHA256 is the hex SHA-256 of what was read.
func (h *HashingReader) SHA256() string { return hex.EncodeToString(h.h.Sum(nil)) }
