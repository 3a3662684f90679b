package s3gw

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"
)

// A multipart upload stages its parts in the branch itself, in the hidden
// directory /.branchnfs-s3-mpu-ID (mpuDir), which holds the key in file
// ".branchnfs-s3-key" and part N in ".branchnfs-s3-part-N" (every name
// hidden, as diffs match names, not paths). Complete copies the parts, in order,
// into a temporary renamed onto the key, then removes the directory.
// Parts of whole blocks (S3 clients send multiples of 1 MiB) land on
// block boundaries of the joined file, so its blocks are the parts' blocks
// and nothing new is stored; only the hashing is redone. (Joining block
// references without reading would need a cowfs call that clones a range
// of one inode's references into another; cowfs has none yet.)

const (
	mpuPrefix   = TempPrefix + "mpu-"
	mpuKeyFile  = TempPrefix + "key"
	partPrefix  = TempPrefix + "part-"
	minPartSize = 5 << 20 // S3's minimum for every part but the last
)

func mpuDir(id string) string { return "/" + mpuPrefix + id }

// upload opens the staging directory of upload id of key.
func (b *Backend) upload(fsys *cowfs.Billy, key, id string) error {
	if id == "" || strings.ContainsAny(id, "/.") {
		return s3err.GetAPIError(s3err.ErrNoSuchUpload)
	}
	f, err := fsys.Open(path.Join(mpuDir(id), mpuKeyFile))
	if err != nil {
		return s3err.GetAPIError(s3err.ErrNoSuchUpload)
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if err != nil || string(got) != key {
		return s3err.GetAPIError(s3err.ErrNoSuchUpload)
	}
	return nil
}

// CreateMultipartUpload makes the upload's staging directory.
func (b *Backend) CreateMultipartUpload(_ context.Context, in s3response.CreateMultipartUploadInput) (s3response.InitiateMultipartUploadResult, error) {
	bucket, key := deref(in.Bucket), deref(in.Key)
	fsys, _, err := b.view(bucket)
	if err != nil {
		return s3response.InitiateMultipartUploadResult{}, err
	}
	if err := checkKey(key); err != nil {
		return s3response.InitiateMultipartUploadResult{}, err
	}
	var r [16]byte
	rand.Read(r[:])
	id := hex.EncodeToString(r[:])
	dir := mpuDir(id)
	if err := fsys.MkdirAll(dir, 0o700); err != nil {
		return s3response.InitiateMultipartUploadResult{}, fsErr(bucket, key, err)
	}
	f, err := fsys.OpenFile(path.Join(dir, mpuKeyFile), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		_, err = f.Write([]byte(key))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		b.removeAll(fsys, dir)
		return s3response.InitiateMultipartUploadResult{}, fsErr(bucket, key, err)
	}
	return s3response.InitiateMultipartUploadResult{Bucket: bucket, Key: key, UploadId: id}, nil
}

// UploadPart stores one part (replacing an earlier one of that number).
func (b *Backend) UploadPart(_ context.Context, in *s3.UploadPartInput) (*s3.UploadPartOutput, error) {
	bucket, key, id := deref(in.Bucket), deref(in.Key), deref(in.UploadId)
	fsys, _, err := b.view(bucket)
	if err != nil {
		return nil, err
	}
	if err := b.upload(fsys, key, id); err != nil {
		return nil, err
	}
	n := int32(0)
	if in.PartNumber != nil {
		n = *in.PartNumber
	}
	if n < 1 || n > 10000 {
		return nil, apiErr("InvalidArgument", http.StatusBadRequest, "part number %d: want 1 to 10000", n)
	}
	part := path.Join(mpuDir(id), partPrefix+strconv.Itoa(int(n)))
	sum, a, err := b.writeFile(fsys, bucket, strings.TrimPrefix(part, "/"), in.Body, in.ContentLength)
	if err != nil {
		return nil, err
	}
	etag := hex.EncodeToString(sum)
	b.etags.put(a, etag)
	return &s3.UploadPartOutput{ETag: ptr(quote(etag))}, nil
}

type stagedPart struct {
	n    int
	name string
	a    cowfs.Attr
}

// parts lists the staged parts of upload id by number.
func (b *Backend) parts(fsys *cowfs.Billy, id string) ([]stagedPart, error) {
	infos, err := fsys.ReadDir(mpuDir(id))
	if err != nil {
		return nil, err
	}
	var out []stagedPart
	for _, fi := range infos {
		num, ok := strings.CutPrefix(fi.Name(), partPrefix)
		if !ok {
			continue
		}
		n, err := strconv.Atoi(num)
		if err != nil {
			continue
		}
		out = append(out, stagedPart{n: n, name: path.Join(mpuDir(id), fi.Name()), a: *fi.Sys().(*cowfs.Attr)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n < out[j].n })
	return out, nil
}

// ListParts lists the parts uploaded so far.
func (b *Backend) ListParts(_ context.Context, in *s3.ListPartsInput) (s3response.ListPartsResult, error) {
	bucket, key, id := deref(in.Bucket), deref(in.Key), deref(in.UploadId)
	fsys, _, err := b.view(bucket)
	if err != nil {
		return s3response.ListPartsResult{}, err
	}
	if err := b.upload(fsys, key, id); err != nil {
		return s3response.ListPartsResult{}, err
	}
	ps, err := b.parts(fsys, id)
	if err != nil {
		return s3response.ListPartsResult{}, fsErr(bucket, key, err)
	}
	marker := 0
	if in.PartNumberMarker != nil {
		marker, _ = strconv.Atoi(*in.PartNumberMarker)
	}
	max := 1000
	if in.MaxParts != nil && *in.MaxParts > 0 && *in.MaxParts < 1000 {
		max = int(*in.MaxParts)
	}
	res := s3response.ListPartsResult{Bucket: bucket, Key: key, UploadID: id, PartNumberMarker: marker, MaxParts: max,
		StorageClass: types.StorageClassStandard}
	for _, p := range ps {
		if p.n <= marker {
			continue
		}
		if len(res.Parts) == max {
			res.IsTruncated = true
			break
		}
		res.Parts = append(res.Parts, s3response.Part{PartNumber: p.n, LastModified: modTime(p.a),
			ETag: quote(b.etag(fsys, strings.TrimPrefix(p.name, "/"), p.a, true)), Size: int64(p.a.Size)})
		res.NextPartNumberMarker = p.n
	}
	return res, nil
}

// CompleteMultipartUpload joins the listed parts into the key (atomically,
// as PutObject) and removes the upload.
func (b *Backend) CompleteMultipartUpload(_ context.Context, in *s3.CompleteMultipartUploadInput) (s3response.CompleteMultipartUploadResult, string, error) {
	bucket, key, id := deref(in.Bucket), deref(in.Key), deref(in.UploadId)
	var res s3response.CompleteMultipartUploadResult
	fsys, _, err := b.view(bucket)
	if err != nil {
		return res, "", err
	}
	if err := b.upload(fsys, key, id); err != nil {
		return res, "", err
	}
	if in.MultipartUpload == nil || len(in.MultipartUpload.Parts) == 0 {
		return res, "", s3err.GetAPIError(s3err.ErrMalformedXML)
	}
	staged, err := b.parts(fsys, id)
	if err != nil {
		return res, "", fsErr(bucket, key, err)
	}
	byNum := map[int]stagedPart{}
	for _, p := range staged {
		byNum[p.n] = p
	}
	want := in.MultipartUpload.Parts
	var files []stagedPart
	var total int64
	for i, cp := range want {
		if cp.PartNumber == nil || cp.ETag == nil {
			return res, "", s3err.GetAPIError(s3err.ErrMalformedXML)
		}
		if i > 0 && *cp.PartNumber <= *want[i-1].PartNumber {
			return res, "", s3err.GetAPIError(s3err.ErrInvalidPartOrder)
		}
		p, ok := byNum[int(*cp.PartNumber)]
		if !ok {
			return res, "", s3err.GetAPIError(s3err.ErrInvalidPart)
		}
		if etag := b.etag(fsys, strings.TrimPrefix(p.name, "/"), p.a, true); strings.Trim(*cp.ETag, `"`) != etag {
			return res, "", s3err.GetAPIError(s3err.ErrInvalidPart)
		}
		if i < len(want)-1 && p.a.Size < minPartSize {
			return res, "", s3err.GetAPIError(s3err.ErrEntityTooSmall)
		}
		files = append(files, p)
		total += int64(p.a.Size)
	}
	etag, err := backend.ComputeMultipartETagFromPartETags(want)
	if err != nil {
		return res, "", err
	}
	if in.IfMatch != nil || in.IfNoneMatch != nil {
		a, err := b.statObject(fsys, bucket, key)
		exists := err == nil
		if err != nil && !isNoSuchKey(err) {
			return res, "", err
		}
		cur := ""
		if exists {
			cur = b.etag(fsys, key, a, true)
		}
		if err := backend.EvaluateObjectPutPreconditions(cur, in.IfMatch, in.IfNoneMatch, exists); err != nil {
			return res, "", err
		}
	}
	r, err := b.openParts(fsys, files)
	if err != nil {
		return res, "", fsErr(bucket, key, err)
	}
	_, a, err := b.writeFile(fsys, bucket, key, r, &total)
	r.Close()
	if err != nil {
		return res, "", err
	}
	etag = strings.Trim(etag, `"`)
	b.etags.put(a, etag)
	if err := b.removeAll(fsys, mpuDir(id)); err != nil {
		b.logger.Warn("s3: cannot remove a completed upload's parts (hidden; they go with the branch)", "branch", bucket, "path", mpuDir(id), "err", err)
	}
	res.Bucket, res.Key, res.ETag = &bucket, &key, ptr(quote(etag))
	return res, "", nil
}

// partsReader reads staged parts one after the other.
type partsReader struct {
	files []io.ReadCloser
	r     io.Reader
}

func (b *Backend) openParts(fsys *cowfs.Billy, parts []stagedPart) (*partsReader, error) {
	pr := &partsReader{}
	readers := make([]io.Reader, 0, len(parts))
	for _, p := range parts {
		f, err := fsys.Open(p.name)
		if err != nil {
			pr.Close()
			return nil, err
		}
		pr.files = append(pr.files, f)
		readers = append(readers, f)
	}
	pr.r = io.MultiReader(readers...)
	return pr, nil
}

func (p *partsReader) Read(b []byte) (int, error) { return p.r.Read(b) }

func (p *partsReader) Close() error {
	for _, f := range p.files {
		f.Close()
	}
	return nil
}

// AbortMultipartUpload removes the upload and its parts.
func (b *Backend) AbortMultipartUpload(_ context.Context, in *s3.AbortMultipartUploadInput) error {
	bucket, key, id := deref(in.Bucket), deref(in.Key), deref(in.UploadId)
	fsys, _, err := b.view(bucket)
	if err != nil {
		return err
	}
	if err := b.upload(fsys, key, id); err != nil {
		return err
	}
	return fsErr(bucket, key, b.removeAll(fsys, mpuDir(id)))
}

// ListMultipartUploads lists the uploads in progress.
func (b *Backend) ListMultipartUploads(_ context.Context, in *s3.ListMultipartUploadsInput) (s3response.ListMultipartUploadsResult, error) {
	bucket := deref(in.Bucket)
	fsys, _, err := b.view(bucket)
	if err != nil {
		return s3response.ListMultipartUploadsResult{}, err
	}
	infos, err := fsys.ReadDir("/")
	if err != nil {
		return s3response.ListMultipartUploadsResult{}, fsErr(bucket, "", err)
	}
	res := s3response.ListMultipartUploadsResult{Bucket: bucket, Prefix: deref(in.Prefix), MaxUploads: 1000}
	for _, fi := range infos {
		id, ok := strings.CutPrefix(fi.Name(), mpuPrefix)
		if !ok || !fi.IsDir() {
			continue
		}
		f, err := fsys.Open(path.Join(mpuDir(id), mpuKeyFile))
		if err != nil {
			continue
		}
		key, _ := io.ReadAll(f)
		f.Close()
		if !strings.HasPrefix(string(key), res.Prefix) {
			continue
		}
		res.Uploads = append(res.Uploads, s3response.Upload{Key: string(key), UploadID: id,
			StorageClass: types.StorageClassStandard, Initiated: modTime(*fi.Sys().(*cowfs.Attr))})
	}
	sort.Slice(res.Uploads, func(i, j int) bool { return res.Uploads[i].Key < res.Uploads[j].Key })
	return res, nil
}

// removeAll removes a tree of the branch.
func (b *Backend) removeAll(fsys *cowfs.Billy, p string) error {
	infos, err := fsys.ReadDir(p)
	if err != nil && !errors.Is(err, syscall.ENOTDIR) {
		if errors.Is(err, syscall.ENOENT) {
			return nil
		}
		return err
	}
	for _, fi := range infos {
		c := path.Join(p, fi.Name())
		if fi.IsDir() {
			if err := b.removeAll(fsys, c); err != nil {
				return err
			}
			continue
		}
		if err := fsys.Remove(c); err != nil && !errors.Is(err, syscall.ENOENT) {
			return err
		}
	}
	if err := fsys.Remove(p); err != nil && !errors.Is(err, syscall.ENOENT) {
		return err
	}
	return nil
}

// CopyObject copies an object of any live branch to a key of this one,
// through a temporary renamed onto the key, as PutObject. Whole blocks
// land where they were, so the copy stores no new block; it reads and
// hashes the data (cowfs has no call that clones block references).
func (b *Backend) CopyObject(_ context.Context, in s3response.CopyObjectInput) (s3response.CopyObjectOutput, error) {
	bucket, key := deref(in.Bucket), deref(in.Key)
	srcBucket, srcKey, _, err := backend.ParseCopySource(deref(in.CopySource))
	if err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	dst, _, err := b.view(bucket)
	if err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	src, _, err := b.view(srcBucket)
	if err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	a, err := b.statObject(src, srcBucket, srcKey)
	if err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	srcEtag := b.etag(src, srcKey, a, true)
	if err := backend.EvaluatePreconditions(srcEtag, modTime(a), backend.PreConditions{
		IfMatch: in.CopySourceIfMatch, IfNoneMatch: in.CopySourceIfNoneMatch,
		IfModSince: in.CopySourceIfModifiedSince, IfUnmodeSince: in.CopySourceIfUnmodifiedSince,
	}); err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	if err := checkKey(key); err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	now := modTime(a)
	if srcBucket == bucket && srcKey == key {
		// S3 allows a copy onto itself only to change metadata, which
		// branches do not keep: nothing to do.
		return s3response.CopyObjectOutput{CopyObjectResult: &s3response.CopyObjectResult{ETag: ptr(quote(srcEtag)), LastModified: &now}}, nil
	}
	f, err := src.Open(srcKey)
	if err != nil {
		return s3response.CopyObjectOutput{}, fsErr(srcBucket, srcKey, err)
	}
	size := int64(a.Size)
	sum, na, err := b.writeFile(dst, bucket, key, f, &size)
	f.Close()
	if err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	etag := srcEtag
	if strings.Contains(srcEtag, "-") {
		etag = hex.EncodeToString(sum) // a copy is a single-part object
	}
	b.etags.put(na, etag)
	mt := modTime(na)
	return s3response.CopyObjectOutput{CopyObjectResult: &s3response.CopyObjectResult{ETag: ptr(quote(etag)), LastModified: &mt}}, nil
}
