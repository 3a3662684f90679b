package s3gw

import (
	"context"
	"encoding/base64"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/versity/versitygw/s3response"
)

// maxListKeys caps max-keys, as S3 does.
const maxListKeys = 1000

// listing is the result of one list call: keys and common prefixes in
// byte order, at most max of them together.
type listing struct {
	objects   []s3response.Object
	prefixes  []string
	truncated bool
	last      string // the last key or common prefix returned
}

// lister walks a branch's tree in S3's byte order. Within a directory a
// subdirectory sorts as its name plus "/", so a depth-first walk visits
// keys in byte order, and a subtree holds exactly the keys that start with
// its directory's key.
type lister struct {
	b                     *Backend
	fsys                  *cowfs.Billy
	prefix, delim, marker string
	max                   int
	out                   listing
	stop                  bool
}

func (b *Backend) list(fsys *cowfs.Billy, bucket, prefix, delim, marker string, max int) (listing, error) {
	if max < 0 || max > maxListKeys {
		max = maxListKeys
	}
	if max == 0 {
		return listing{}, nil
	}
	// A walk reads directory after directory; a commit into the branch
	// swaps its stack of layers at once. A walk that saw the stack change
	// may have seen part of both sides, so it is redone: a listing shows a
	// commit whole or not at all.
	var l *lister
	for try := 0; try < maxListTries; try++ {
		before := fsys.Stack()
		l = &lister{b: b, fsys: fsys, prefix: prefix, delim: delim, marker: marker, max: max}
		if err := l.walk(""); err != nil {
			return listing{}, fsErr(bucket, prefix, err)
		}
		if slices.Equal(before, fsys.Stack()) {
			break
		}
	}
	return l.out, nil
}

// maxListTries bounds the walks of one listing (see list).
const maxListTries = 8

// add records one item, or notes that the listing is truncated when it
// holds max already.
func (l *lister) add(obj *s3response.Object, cp string) {
	if len(l.out.objects)+len(l.out.prefixes) >= l.max {
		l.out.truncated = true
		l.stop = true
		return
	}
	if obj != nil {
		l.out.objects = append(l.out.objects, *obj)
		l.out.last = *obj.Key
	} else {
		l.out.prefixes = append(l.out.prefixes, cp)
		l.out.last = cp
	}
}

type entry struct {
	key string
	a   cowfs.Attr
}

// walk lists the directory whose key is dir ("" for the root, else ending
// in "/").
func (l *lister) walk(dir string) error {
	fsPath := strings.TrimSuffix(dir, "/")
	if fsPath == "" {
		fsPath = "/"
	}
	infos, err := l.fsys.ReadDir(fsPath)
	if err != nil {
		if dir != "" && isGone(err) {
			return nil // removed while we listed
		}
		return err
	}
	ents := make([]entry, 0, len(infos))
	for _, fi := range infos {
		if hidden(fi.Name()) {
			continue
		}
		a := *fi.Sys().(*cowfs.Attr)
		switch a.Type {
		case cowfs.TypeDir:
			ents = append(ents, entry{dir + fi.Name() + "/", a})
		case cowfs.TypeRegular:
			ents = append(ents, entry{dir + fi.Name(), a})
		}
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].key < ents[j].key })
	for _, e := range ents {
		if l.stop {
			return nil
		}
		k := e.key
		if e.a.Type == cowfs.TypeDir {
			if !strings.HasPrefix(k, l.prefix) && !strings.HasPrefix(l.prefix, k) {
				continue
			}
			if k < l.marker && !strings.HasPrefix(l.marker, k) {
				continue // every key below sorts before the marker
			}
			if l.delim == "/" && len(k) > len(l.prefix) && strings.HasPrefix(k, l.prefix) && !strings.Contains(k[len(l.prefix):len(k)-1], "/") {
				// The directory is one common prefix: no need to look in.
				if k > l.marker {
					l.add(nil, k)
				}
				continue
			}
			if err := l.walk(k); err != nil {
				return err
			}
			continue
		}
		if !strings.HasPrefix(k, l.prefix) || k <= l.marker {
			continue
		}
		if l.delim != "" {
			if i := strings.Index(k[len(l.prefix):], l.delim); i >= 0 {
				cp := k[:len(l.prefix)+i+len(l.delim)]
				if cp > l.marker && cp != l.out.last {
					l.add(nil, cp)
				}
				continue
			}
		}
		etag := quote(l.b.etag(l.fsys, k, e.a, e.a.Size <= onDemandMD5))
		l.add(&s3response.Object{
			Key: ptr(k), ETag: &etag, Size: ptr(int64(e.a.Size)),
			LastModified: ptr(modTime(e.a)), StorageClass: types.ObjectStorageClassStandard,
		}, "")
	}
	return nil
}

func commonPrefixes(ps []string) []types.CommonPrefix {
	out := make([]types.CommonPrefix, len(ps))
	for i, p := range ps {
		out[i] = types.CommonPrefix{Prefix: ptr(p)}
	}
	return out
}

// ListObjectsV2 lists keys in byte order: prefix, delimiter, start-after,
// continuation token and max-keys as S3 has them; directories are common
// prefixes with delimiter "/".
func (b *Backend) ListObjectsV2(_ context.Context, in *s3.ListObjectsV2Input) (s3response.ListObjectsV2Result, error) {
	bucket := deref(in.Bucket)
	fsys, _, err := b.view(bucket)
	if err != nil {
		return s3response.ListObjectsV2Result{}, err
	}
	marker := deref(in.StartAfter)
	if tok := deref(in.ContinuationToken); tok != "" {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			return s3response.ListObjectsV2Result{}, apiErr("InvalidArgument", http.StatusBadRequest, "the continuation token is not one this server made")
		}
		if string(raw) > marker {
			marker = string(raw)
		}
	}
	max := maxListKeys
	if in.MaxKeys != nil {
		max = int(*in.MaxKeys)
	}
	res, err := b.list(fsys, bucket, deref(in.Prefix), deref(in.Delimiter), marker, max)
	if err != nil {
		return s3response.ListObjectsV2Result{}, err
	}
	out := s3response.ListObjectsV2Result{
		Name: &bucket, Prefix: in.Prefix, StartAfter: in.StartAfter, ContinuationToken: in.ContinuationToken,
		KeyCount: ptr(int32(len(res.objects) + len(res.prefixes))), MaxKeys: ptr(int32(max)),
		Delimiter: in.Delimiter, IsTruncated: ptr(res.truncated),
		Contents: res.objects, CommonPrefixes: commonPrefixes(res.prefixes),
	}
	if res.truncated {
		out.NextContinuationToken = ptr(base64.RawURLEncoding.EncodeToString([]byte(res.last)))
	}
	return out, nil
}

// ListObjects is the version 1 listing (marker instead of tokens).
func (b *Backend) ListObjects(_ context.Context, in *s3.ListObjectsInput) (s3response.ListObjectsResult, error) {
	bucket := deref(in.Bucket)
	fsys, _, err := b.view(bucket)
	if err != nil {
		return s3response.ListObjectsResult{}, err
	}
	max := maxListKeys
	if in.MaxKeys != nil {
		max = int(*in.MaxKeys)
	}
	res, err := b.list(fsys, bucket, deref(in.Prefix), deref(in.Delimiter), deref(in.Marker), max)
	if err != nil {
		return s3response.ListObjectsResult{}, err
	}
	out := s3response.ListObjectsResult{
		Name: &bucket, Prefix: in.Prefix, Marker: in.Marker, MaxKeys: ptr(int32(max)),
		Delimiter: in.Delimiter, IsTruncated: ptr(res.truncated),
		Contents: res.objects, CommonPrefixes: commonPrefixes(res.prefixes),
	}
	if res.truncated {
		out.NextMarker = ptr(res.last)
	}
	return out, nil
}
