package branches

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/branchnfs/branchnfs/kv"
)

// The ignore list of a store: base-name patterns kept out of diffs and
// merge conflicts (the child wins). It is stored under key 'I' once set,
// so every later open (server or CLI) applies the same list.

var ignoreKey = []byte{'I'}

// InternalIgnore lists base-name patterns of files the server itself makes
// in branches (the S3 front end's upload temporaries and staged parts):
// ignored whatever the store's list says.
var InternalIgnore = []string{".branchnfs-s3-*"}

// CheckIgnore validates ignore patterns: path.Match syntax, matching base
// names (no '/').
func CheckIgnore(patterns []string) error {
	for _, p := range patterns {
		if p == "" || strings.Contains(p, "/") {
			return fmt.Errorf("%w: %q (a pattern matches one file name: no '/', not empty)", ErrInvalidPattern, p)
		}
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("%w: %q (%v; see Go's path.Match: * ? [a-z] and \\ escapes)", ErrInvalidPattern, p, err)
		}
	}
	return nil
}

// loadIgnore returns the ignore list to use: set, when non-nil, after
// storing it; else the stored one, else DefaultIgnore.
func loadIgnore(ctx context.Context, store kv.Store, set []string) ([]string, error) {
	if set != nil {
		if err := CheckIgnore(set); err != nil {
			return nil, err
		}
		v, err := json.Marshal(set)
		if err != nil {
			return nil, err
		}
		if err := store.Update(ctx, func(tx kv.Txn) error { return tx.Set(ignoreKey, v) }); err != nil {
			return nil, fmt.Errorf("branches: store the ignore list: %w", mapErr(err))
		}
		return append([]string{}, set...), nil
	}
	var out []string
	err := store.View(ctx, func(tx kv.Txn) error {
		v, err := tx.Get(ignoreKey)
		if errors.Is(err, kv.ErrNotFound) {
			out = append([]string{}, DefaultIgnore...)
			return nil
		}
		if err != nil {
			return err
		}
		out = []string{}
		if err := json.Unmarshal(v, &out); err != nil {
			return fmt.Errorf("branches: corrupt ignore list %q: %w", v, err)
		}
		return nil
	})
	return out, err
}
