package cowfs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/branchnfs/branchnfs/kv"
)

// Names are form-insensitive and form-preserving, as on APFS: a directory
// entry keeps the bytes it was created with (READDIR returns them), while
// lookups, creates, links, renames and removals treat the Unicode NFC and
// NFD spellings of a name as one name. Shells send NFC, Cocoa apps NFD.

// foldName returns the form names are compared and hashed in (NFC). Names
// that are not valid UTF-8 are compared as bytes.
func foldName(name string) string {
	if isASCII(name) || !utf8.ValidString(name) {
		return name
	}
	return norm.NFC.String(name)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// sameName reports whether stored names the same entry as a name whose
// folded form is key.
func sameName(stored, key string) bool {
	return stored == key || foldName(stored) == key
}

// legacySlots are the first probe slots where a store of format 1 may
// hold name: at the hash of the bytes a client sent, NFC or NFD. The
// first one (NFC) is nameSlot itself.
func legacySlots(name string) []uint64 {
	if isASCII(name) || !utf8.ValidString(name) {
		return nil
	}
	var out []uint64
	main := nameSlot(name)
	for _, s := range []uint64{hashSlot(norm.NFD.String(name)), hashSlot(name)} {
		if s != main && (len(out) == 0 || out[0] != s) {
			out = append(out, s)
		}
	}
	return out
}

// Store formats, kept under the meta key "format".
//
//	1 (no key): directory slots hash a name's bytes as given.
//	2: directory slots hash a name's NFC form.
//	3: block references may be extents (extent.go). A store of format 2
//	   becomes 3 in the transaction that writes its first extent; a store
//	   of format 1 gets none.
const storeFormat = 3

var formatKey = metaKey("format")

// migration says how a store of format from reaches format from+1. Every
// format before storeFormat has one (TestFormatMigrations): a new format
// comes with its migration, and a frozen store of the format before it in
// cmd/branchnfs/testdata.
type migration struct {
	from uint64
	// how: when the store changes format, and why then.
	how string
}

var migrations = []migration{
	{1, "never: entries stay at the slots of their bytes, as moving one would also need its whiteouts in upper layers moved, and whiteouts do not record names; Open sets Options.LegacyNameSlots instead (probes both slots) and the store keeps format 1, so it gets no extents"},
	{2, "lazily: the transaction that writes the store's first extent stamps format 3 (extentsFormat), so that a build predating extents refuses the store from then on"},
}

// openFormat checks the store's format and reports whether it predates
// form-insensitive names (format 1): Open sets Options.LegacyNameSlots
// then. A new store (no layer yet) is stamped with the current
// format. A store of a newer format is refused: this build would misread
// it.
func openFormat(ctx context.Context, store kv.Store) (legacy bool, err error) {
	stamp := false
	// Read first: opening an existing store writes nothing (it may be on
	// a full disk, or read-only).
	err = store.View(ctx, func(tx kv.Txn) error {
		v, err := tx.Get(formatKey)
		switch {
		case err == nil:
			if len(v) != 8 {
				return fmt.Errorf("cowfs: store format record %x: %w", v, errCorrupt)
			}
			if f := binary.BigEndian.Uint64(v); f > storeFormat {
				return &FormatError{Store: f, Build: storeFormat}
			}
			legacy, stamp = false, false
			return nil
		case !errors.Is(err, kv.ErrNotFound):
			return err
		}
		empty := true
		if err := tx.Iterate([]byte{pfxLayer}, nil, true, func(k, _ []byte) (bool, error) {
			empty = false
			return false, nil
		}); err != nil {
			return err
		}
		legacy, stamp = !empty, empty
		return nil
	})
	if err != nil || !stamp {
		return legacy, err
	}
	return false, store.Update(ctx, func(tx kv.Txn) error { return tx.Set(formatKey, u64(nil, storeFormat)) })
}
