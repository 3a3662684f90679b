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

// The ignore list of a store: patterns of paths kept out of diffs and
// merge conflicts (the child wins). It is stored under key 'I' once set,
// so every later open (server or CLI) applies the same list.
//
// A pattern without '/' is a name pattern: it matches the last name of a
// path (path.Match syntax), at any depth, as it always did. A pattern with
// a '/' is a path pattern, as in .gitignore:
//   - "NAME/" (a trailing '/' and no other) matches a directory of that
//     name at any depth, and everything under it: "node_modules/";
//   - otherwise the pattern is anchored at the branch's root (a leading
//     '/' is allowed and changes nothing); each of its segments matches
//     one name (path.Match), "**" matches any number of names, and what a
//     pattern matches covers everything under it: "build/**",
//     "/dist", "src/**/*.gen.go". A trailing '/' changes nothing for it.

var ignoreKey = []byte{'I'}

// ignorePattern is one compiled pattern.
type ignorePattern struct {
	name     string   // a name pattern, or the name of a "NAME/" pattern
	anyDepth bool     // "NAME/": any path with a component matching name
	segs     []string // an anchored path pattern
}

func compileIgnore(p string) (ignorePattern, error) {
	if !strings.Contains(p, "/") {
		return ignorePattern{name: p}, nil
	}
	if strings.Count(p, "/") == 1 && strings.HasSuffix(p, "/") {
		return ignorePattern{name: strings.TrimSuffix(p, "/"), anyDepth: true}, nil
	}
	segs := strings.Split(strings.Trim(p, "/"), "/")
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return ignorePattern{}, fmt.Errorf("an empty, '.' or '..' segment")
		}
	}
	return ignorePattern{segs: segs}, nil
}

// match reports whether the pattern matches p ('/'-separated, relative to
// the branch's root) or a directory above it.
func (ip ignorePattern) match(p string) bool {
	p = strings.Trim(p, "/")
	if ip.segs == nil && !ip.anyDepth {
		ok, _ := path.Match(ip.name, path.Base(p))
		return ok
	}
	parts := strings.Split(p, "/")
	if ip.anyDepth {
		for _, n := range parts {
			if ok, _ := path.Match(ip.name, n); ok {
				return true
			}
		}
		return false
	}
	for k := 1; k <= len(parts); k++ {
		if matchSegs(ip.segs, parts[:k]) {
			return true
		}
	}
	return false
}

// matchSegs matches pattern segments (with "**") against path names.
func matchSegs(pat, names []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			if len(pat) == 1 {
				return len(names) > 0 // "dir/**": what is inside, not dir
			}
			for i := 0; i <= len(names); i++ {
				if matchSegs(pat[1:], names[i:]) {
					return true
				}
			}
			return false
		}
		if len(names) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], names[0]); !ok {
			return false
		}
		pat, names = pat[1:], names[1:]
	}
	return len(names) == 0
}

// ignoreSet is a compiled ignore list.
type ignoreSet []ignorePattern

func compileIgnoreSet(patterns []string) (ignoreSet, error) {
	out := make(ignoreSet, 0, len(patterns))
	for _, p := range patterns {
		ip, err := compileIgnore(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %q (%v)", ErrInvalidPattern, p, err)
		}
		out = append(out, ip)
	}
	return out, nil
}

// match reports whether path p is ignored.
func (s ignoreSet) match(p string) bool {
	for _, ip := range s {
		if ip.match(p) {
			return true
		}
	}
	return false
}

// InternalIgnore lists name patterns of files the server itself makes in
// branches (the S3 front end's upload temporaries and staged parts):
// ignored whatever the store's list says.
var InternalIgnore = []string{".branchnfs-s3-*"}

// internalIgnores is InternalIgnore compiled.
var internalIgnores = mustCompileIgnoreSet(InternalIgnore)

func mustCompileIgnoreSet(patterns []string) ignoreSet {
	s, err := compileIgnoreSet(patterns)
	if err != nil {
		panic(err)
	}
	return s
}

// CheckIgnore validates ignore patterns: name patterns (no '/') and path
// patterns (see above), in path.Match syntax.
func CheckIgnore(patterns []string) error {
	for _, p := range patterns {
		if p == "" || strings.Trim(p, "/") == "" {
			return fmt.Errorf("%w: %q (a pattern matches a file name, such as *.log, or a path, such as node_modules/ or build/**; not empty)", ErrInvalidPattern, p)
		}
		if _, err := compileIgnore(p); err != nil {
			return fmt.Errorf("%w: %q (%v)", ErrInvalidPattern, p, err)
		}
		for _, seg := range strings.Split(strings.Trim(p, "/"), "/") {
			if _, err := path.Match(seg, ""); err != nil {
				return fmt.Errorf("%w: %q (%v; see Go's path.Match: * ? [a-z] and \\ escapes, and ** for any number of directories)", ErrInvalidPattern, p, err)
			}
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
