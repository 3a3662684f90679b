package s3gw

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/go-git/go-billy/v5"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"
)

// copyBuf is the size of the writes PutObject makes into cowfs.
const copyBuf = 1 << 20

// HeadObject describes a regular file of the branch.
func (b *Backend) HeadObject(_ context.Context, in *s3.HeadObjectInput) (*s3.HeadObjectOutput, error) {
	bucket, key := deref(in.Bucket), deref(in.Key)
	fsys, _, err := b.view(bucket)
	if err != nil {
		return nil, err
	}
	a, err := b.statObject(fsys, bucket, key)
	if err != nil {
		return nil, err
	}
	etag := b.etag(fsys, key, a, true)
	if err := backend.EvaluatePreconditions(etag, modTime(a), backend.PreConditions{
		IfMatch: in.IfMatch, IfNoneMatch: in.IfNoneMatch, IfModSince: in.IfModifiedSince, IfUnmodeSince: in.IfUnmodifiedSince,
	}); err != nil {
		return nil, err
	}
	size := int64(a.Size)
	length := size
	var contentRange *string
	if in.Range != nil && *in.Range != "" {
		start, n, ok, err := backend.ParseObjectRange(size, *in.Range)
		if err != nil {
			return nil, err
		}
		if ok {
			length = n
			contentRange = ptr(fmt.Sprintf("bytes %d-%d/%d", start, start+n-1, size))
		}
	}
	return &s3.HeadObjectOutput{
		ContentLength: &length,
		ContentRange:  contentRange,
		ContentType:   ptr("binary/octet-stream"),
		ETag:          ptr(quote(etag)),
		LastModified:  ptr(modTime(a)),
		AcceptRanges:  ptr("bytes"),
		StorageClass:  types.StorageClassStandard,
	}, nil
}

// GetObject reads a regular file of the branch, or a range of it. A whole
// read records the content's MD5 as the file's ETag.
func (b *Backend) GetObject(_ context.Context, in *s3.GetObjectInput) (*s3.GetObjectOutput, error) {
	bucket, key := deref(in.Bucket), deref(in.Key)
	fsys, _, err := b.view(bucket)
	if err != nil {
		return nil, err
	}
	if _, err := b.statObject(fsys, bucket, key); err != nil {
		return nil, err
	}
	// Open first, then read the attributes of the inode opened: a PUT
	// renaming a new file onto the key meanwhile cannot mix the old size
	// with the new content.
	f, err := fsys.Open(key)
	if err != nil {
		return nil, fsErr(bucket, key, err)
	}
	a, err := fsys.GetAttr(f.(*cowfs.File).Ino())
	if err != nil {
		f.Close()
		return nil, fsErr(bucket, key, err)
	}
	etag := b.etag(fsys, key, a, true)
	if err := backend.EvaluatePreconditions(etag, modTime(a), backend.PreConditions{
		IfMatch: in.IfMatch, IfNoneMatch: in.IfNoneMatch, IfModSince: in.IfModifiedSince, IfUnmodeSince: in.IfUnmodifiedSince,
	}); err != nil {
		f.Close()
		return nil, err
	}
	size := int64(a.Size)
	start, length := int64(0), size
	var contentRange *string
	if in.PartNumber != nil {
		if *in.PartNumber > 1 {
			f.Close()
			return nil, s3err.GetInvalidPartNumberRangeErr(1, *in.PartNumber)
		}
		if size > 0 {
			contentRange = ptr(fmt.Sprintf("bytes 0-%d/%d", size-1, size))
		}
	} else if in.Range != nil && *in.Range != "" {
		s, n, ok, err := backend.ParseObjectRange(size, *in.Range)
		if err != nil {
			f.Close()
			return nil, err
		}
		if ok {
			start, length = s, n
			contentRange = ptr(fmt.Sprintf("bytes %d-%d/%d", s, s+n-1, size))
		}
	}
	var body io.ReadCloser = &sectionReader{f: f, r: io.NewSectionReader(f.(io.ReaderAt), start, length)}
	if start == 0 && length == size && !b.etags.known(a) {
		body = &hashingReader{ReadCloser: body, h: md5.New(), want: size, done: func(sum []byte) {
			b.etags.put(a, hex.EncodeToString(sum))
		}}
	}
	return &s3.GetObjectOutput{
		Body:          body,
		ContentLength: &length,
		ContentRange:  contentRange,
		ContentType:   ptr("binary/octet-stream"),
		ETag:          ptr(quote(etag)),
		LastModified:  ptr(modTime(a)),
		AcceptRanges:  ptr("bytes"),
		StorageClass:  types.StorageClassStandard,
	}, nil
}

type sectionReader struct {
	f interface{ Close() error }
	r *io.SectionReader
}

func (s *sectionReader) Read(p []byte) (int, error) { return s.r.Read(p) }
func (s *sectionReader) Close() error               { return s.f.Close() }

// hashingReader hashes what it reads and calls done with the sum once it
// read exactly want bytes and met EOF.
type hashingReader struct {
	io.ReadCloser
	h    hash.Hash
	n    int64
	want int64
	done func(sum []byte)
}

func (r *hashingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.h.Write(p[:n])
	r.n += int64(n)
	if err == io.EOF && r.n == r.want && r.done != nil {
		r.done(r.h.Sum(nil))
		r.done = nil
	}
	return n, err
}

func quote(etag string) string { return `"` + etag + `"` }

// tempName returns a fresh hidden name in dir.
func tempName(dir, what string) string {
	var r [8]byte
	rand.Read(r[:])
	return path.Join(dir, TempPrefix+what+"-"+hex.EncodeToString(r[:]))
}

// PutObject writes the body to a hidden temporary in the key's directory
// (made as needed), then renames it onto the key: readers see the old
// object or the new one.
func (b *Backend) PutObject(_ context.Context, in s3response.PutObjectInput) (s3response.PutObjectOutput, error) {
	bucket, key := deref(in.Bucket), deref(in.Key)
	fsys, _, err := b.view(bucket)
	if err != nil {
		return s3response.PutObjectOutput{}, err
	}
	if err := checkKey(key); err != nil {
		return s3response.PutObjectOutput{}, err
	}
	if in.IfMatch != nil || in.IfNoneMatch != nil {
		a, err := b.statObject(fsys, bucket, key)
		exists := err == nil
		if err != nil && !isNoSuchKey(err) {
			return s3response.PutObjectOutput{}, err
		}
		etag := ""
		if exists {
			etag = b.etag(fsys, key, a, true)
		}
		if err := backend.EvaluateObjectPutPreconditions(etag, in.IfMatch, in.IfNoneMatch, exists); err != nil {
			return s3response.PutObjectOutput{}, err
		}
	}
	if strings.HasSuffix(key, "/") {
		// A folder marker: the directory.
		if err := mkdirAll(fsys, strings.TrimSuffix(key, "/")); err != nil {
			return s3response.PutObjectOutput{}, fsErr(bucket, key, err)
		}
		if _, err := io.Copy(io.Discard, in.Body); err != nil {
			return s3response.PutObjectOutput{}, err
		}
		return s3response.PutObjectOutput{ETag: quote(emptyMD5)}, nil
	}
	sum, a, err := b.writeFile(fsys, bucket, key, in.Body, in.ContentLength)
	if err != nil {
		return s3response.PutObjectOutput{}, err
	}
	etag := hex.EncodeToString(sum)
	if in.ContentMD5 != nil && *in.ContentMD5 != "" {
		// The controller checks Content-MD5 as well when it can; this
		// keeps a mismatch from being stored.
		if want, err := base64.StdEncoding.DecodeString(*in.ContentMD5); err == nil && hex.EncodeToString(want) != etag {
			fsys.Remove(key)
			return s3response.PutObjectOutput{}, s3err.GetAPIError(s3err.ErrBadDigest)
		}
	}
	b.etags.put(a, etag)
	size := int64(a.Size)
	return s3response.PutObjectOutput{ETag: quote(etag), Size: &size}, nil
}

const emptyMD5 = "d41d8cd98f00b204e9800998ecf8427e"

func isNoSuchKey(err error) bool {
	var ae s3err.APIError
	return errors.As(err, &ae) && ae.Code == "NoSuchKey"
}

// writeFile writes r to key through a hidden temporary renamed onto it,
// and returns the content's MD5 and the file's attributes.
func (b *Backend) writeFile(fsys *cowfs.Billy, bucket, key string, r io.Reader, length *int64) ([]byte, cowfs.Attr, error) {
	dir := path.Dir(key)
	tmp := tempName(dir, "put")
	var f billy.File
	var err error
	for try := 0; ; try++ {
		if err = mkdirAll(fsys, dir); err == nil {
			f, err = fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		}
		// A DeleteObject may remove the directory it emptied between
		// mkdirAll and the create: make it again.
		if err == nil || try == 3 || !(errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESTALE)) {
			break
		}
	}
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return nil, cowfs.Attr{}, apiErr("InvalidArgument", http.StatusConflict,
				"cannot put %s/%s: a parent of the key is a file of the branch", bucket, key)
		}
		return nil, cowfs.Attr{}, fsErr(bucket, key, err)
	}
	renamed := false
	defer func() {
		if !renamed {
			if err := fsys.Remove(tmp); err != nil && !errors.Is(err, syscall.ENOENT) {
				b.logger.Warn("s3: cannot remove an upload's temporary (hidden; it goes with the branch)", "branch", bucket, "path", tmp, "err", err)
			}
		}
	}()
	h := md5.New()
	w := f.(io.WriterAt)
	buf := make([]byte, copyBuf)
	var off int64
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			h.Write(buf[:n])
			if _, err := w.WriteAt(buf[:n], off); err != nil {
				f.Close()
				return nil, cowfs.Attr{}, fsErr(bucket, key, err)
			}
			off += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			f.Close()
			return nil, cowfs.Attr{}, rerr
		}
	}
	if err := f.Close(); err != nil {
		return nil, cowfs.Attr{}, fsErr(bucket, key, err)
	}
	if length != nil && *length >= 0 && off != *length {
		return nil, cowfs.Attr{}, s3err.GetAPIError(s3err.ErrIncompleteBody)
	}
	uid, gid := owner(fsys, dir)
	if err := fsys.Chown(tmp, uid, gid); err != nil {
		return nil, cowfs.Attr{}, fsErr(bucket, key, err)
	}
	if err := fsys.Rename(tmp, key); err != nil {
		return nil, cowfs.Attr{}, fsErr(bucket, key, err)
	}
	renamed = true
	fi, err := fsys.Stat(key)
	if err != nil {
		return nil, cowfs.Attr{}, fsErr(bucket, key, err)
	}
	return h.Sum(nil), *fi.Sys().(*cowfs.Attr), nil
}

// DeleteObject removes the file at key, then the directories above it
// that it left empty (S3 has no empty prefixes). A missing key is no
// error.
func (b *Backend) DeleteObject(_ context.Context, in *s3.DeleteObjectInput) (*s3.DeleteObjectOutput, error) {
	bucket, key := deref(in.Bucket), deref(in.Key)
	fsys, _, err := b.view(bucket)
	if err != nil {
		return nil, err
	}
	if err := b.deleteKey(fsys, bucket, key); err != nil {
		return nil, err
	}
	return &s3.DeleteObjectOutput{}, nil
}

func (b *Backend) deleteKey(fsys *cowfs.Billy, bucket, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	name := strings.TrimSuffix(key, "/")
	fi, err := fsys.Lstat(name)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) {
			return nil
		}
		return fsErr(bucket, key, err)
	}
	if fi.IsDir() != strings.HasSuffix(key, "/") {
		return nil // "a" names no object when a is a directory, nor "a/" when a file
	}
	if err := fsys.Remove(name); err != nil {
		if fi.IsDir() && errors.Is(err, syscall.ENOTEMPTY) {
			return nil // a folder marker over objects: the objects stay
		}
		return fsErr(bucket, key, err)
	}
	for dir := path.Dir(name); dir != "." && dir != "/"; dir = path.Dir(dir) {
		if err := fsys.Remove(dir); err != nil {
			break // not empty (or gone): stop
		}
	}
	return nil
}

// DeleteObjects deletes each key as DeleteObject does, reporting each.
func (b *Backend) DeleteObjects(_ context.Context, in *s3.DeleteObjectsInput) (s3response.DeleteResult, error) {
	bucket := deref(in.Bucket)
	fsys, _, err := b.view(bucket)
	if err != nil {
		return s3response.DeleteResult{}, err
	}
	var res s3response.DeleteResult
	if in.Delete == nil {
		return res, nil
	}
	for _, o := range in.Delete.Objects {
		key := deref(o.Key)
		if err := b.deleteKey(fsys, bucket, key); err != nil {
			code, msg := "InternalError", err.Error()
			var ae s3err.APIError
			if errors.As(err, &ae) {
				code, msg = ae.Code, ae.Description
			}
			res.Error = append(res.Error, types.Error{Key: ptr(key), Code: ptr(code), Message: ptr(msg)})
			continue
		}
		res.Deleted = append(res.Deleted, types.DeletedObject{Key: ptr(key)})
	}
	return res, nil
}
