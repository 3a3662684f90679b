package s3gw

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/cowfs"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"
)

// TempPrefix starts the names of PutObject's temporaries and of the
// directories multipart uploads stage their parts in. It matches
// branches.InternalIgnore, so these names stay out of diffs, and listings
// hide them.
const TempPrefix = ".branchnfs-s3-"

// ParentHeader names the branch CreateBucket forks (default main).
const ParentHeader = "X-Branchnfs-Parent"

// Backend is versitygw's backend.Backend over the live branches of a
// Manager. Operations it does not implement answer NotImplemented.
type Backend struct {
	backend.BackendUnsupported
	mgr    *branches.Manager // read only
	logger *slog.Logger      // read only
	etags  *etagCache
}

var _ backend.Backend = (*Backend)(nil)

// NewBackend returns the Backend over mgr's branches.
func NewBackend(mgr *branches.Manager, logger *slog.Logger) *Backend {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Backend{mgr: mgr, logger: logger, etags: newEtagCache(defaultEtagEntries)}
}

func (b *Backend) String() string { return "branchnfs" }

// CheckpointSep joins a branch and one of its checkpoints in the name of
// the checkpoint's read-only bucket: BRANCH--LABEL.
const CheckpointSep = "--"

// view returns the billy filesystem of a bucket: a live branch, else a
// checkpoint BRANCH--LABEL of one (read-only; a live branch of that very
// name wins).
func (b *Backend) view(bucket string) (*cowfs.Billy, branches.Info, error) {
	v, info, err := b.mgr.View(bucket)
	if err == nil {
		return v.Billy(), info, nil
	}
	if br, label, ok := strings.Cut(bucket, CheckpointSep); ok && br != "" && label != "" &&
		(errors.Is(err, branches.ErrNotFound) || errors.Is(err, branches.ErrInvalidName)) {
		cv, _, cerr := b.mgr.CheckpointView(context.Background(), br, label)
		if cerr == nil {
			return cv.Billy(), branches.Info{Name: bucket, State: branches.StateLive}, nil
		}
		if errors.Is(cerr, branches.ErrNotFound) || errors.Is(cerr, branches.ErrInvalidName) {
			return nil, branches.Info{}, apiErr("NoSuchBucket", http.StatusNotFound,
				"no live branch %q, nor checkpoint %q of a live branch %q (branchnfs list shows both)", bucket, label, br)
		}
		return nil, branches.Info{}, bucketErr(br, cerr)
	}
	return nil, branches.Info{}, bucketErr(bucket, err)
}

// isCheckpoint reports whether bucket names a checkpoint, not a branch.
func (b *Backend) isCheckpoint(bucket string) bool {
	if _, _, err := b.mgr.View(bucket); err == nil {
		return false
	}
	_, _, err := b.view(bucket)
	return err == nil
}

func hidden(name string) bool { return strings.HasPrefix(name, TempPrefix) }

// ListBuckets lists the live branches and their checkpoints
// (BRANCH--LABEL), by name.
func (b *Backend) ListBuckets(ctx context.Context, in s3response.ListBucketsInput) (s3response.ListAllMyBucketsResult, error) {
	live := b.mgr.Live()
	out := s3response.ListAllMyBucketsResult{Owner: s3response.CanonicalUser{ID: in.Owner}}
	var list []s3response.ListAllMyBucketsEntry
	for _, info := range live {
		if hidden(info.Name) || strings.HasPrefix(info.Name, ".") {
			continue // .import-* and such are the server's own
		}
		list = append(list, s3response.ListAllMyBucketsEntry{Name: info.Name, CreationDate: info.ForkTime})
		full, err := b.mgr.Get(ctx, info.Name)
		if err != nil {
			continue // gone meanwhile
		}
		for _, label := range full.Checkpoints {
			list = append(list, s3response.ListAllMyBucketsEntry{Name: info.Name + CheckpointSep + label, CreationDate: info.ForkTime})
		}
	}
	list = slices.DeleteFunc(list, func(e s3response.ListAllMyBucketsEntry) bool { return !strings.HasPrefix(e.Name, in.Prefix) })
	sortBuckets(list)
	if in.ContinuationToken != "" {
		i := 0
		for i < len(list) && list[i].Name <= in.ContinuationToken {
			i++
		}
		list = list[i:]
	}
	if in.MaxBuckets > 0 && len(list) > int(in.MaxBuckets) {
		list = list[:in.MaxBuckets]
		out.ContinuationToken = list[len(list)-1].Name
	}
	out.Buckets.Bucket = list
	out.Prefix = in.Prefix
	return out, nil
}

// HeadBucket answers whether the branch is live.
func (b *Backend) HeadBucket(_ context.Context, in *s3.HeadBucketInput) (*s3.HeadBucketOutput, error) {
	if _, _, err := b.view(deref(in.Bucket)); err != nil {
		return nil, err
	}
	region := "us-east-1"
	return &s3.HeadBucketOutput{BucketRegion: &region}, nil
}

// GetBucketAcl answers an empty ACL (the store's key owns every bucket,
// nothing is public) for a live branch.
func (b *Backend) GetBucketAcl(_ context.Context, in *s3.GetBucketAclInput) ([]byte, error) {
	if _, _, err := b.view(deref(in.Bucket)); err != nil {
		return nil, err
	}
	return nil, nil
}

// GetBucketPolicy: branches have no policy.
func (b *Backend) GetBucketPolicy(_ context.Context, bucket string) ([]byte, error) {
	if _, _, err := b.view(bucket); err != nil {
		return nil, err
	}
	return nil, s3err.GetAPIError(s3err.ErrNoSuchBucketPolicy)
}

// GetBucketVersioning: branches are not versioned (checkpoints are their
// history).
func (b *Backend) GetBucketVersioning(_ context.Context, bucket string) (s3response.GetBucketVersioningOutput, error) {
	if _, _, err := b.view(bucket); err != nil {
		return s3response.GetBucketVersioningOutput{}, err
	}
	return s3response.GetBucketVersioningOutput{}, nil
}

// GetObjectLockConfiguration: no object lock.
func (b *Backend) GetObjectLockConfiguration(_ context.Context, bucket string) ([]byte, error) {
	if _, _, err := b.view(bucket); err != nil {
		return nil, err
	}
	return nil, s3err.GetAPIError(s3err.ErrObjectLockConfigurationNotFound)
}

// GetBucketOwnershipControls: the bucket owner owns every object.
func (b *Backend) GetBucketOwnershipControls(_ context.Context, bucket string) (types.ObjectOwnership, error) {
	if _, _, err := b.view(bucket); err != nil {
		return "", err
	}
	return types.ObjectOwnershipBucketOwnerEnforced, nil
}

// GetBucketTagging: no tags.
func (b *Backend) GetBucketTagging(_ context.Context, bucket string) (map[string]string, error) {
	if _, _, err := b.view(bucket); err != nil {
		return nil, err
	}
	return nil, s3err.GetAPIError(s3err.ErrBucketTaggingNotFound)
}

// GetObjectTagging: no tags (an existing object has none).
func (b *Backend) GetObjectTagging(_ context.Context, bucket, object, _ string) (map[string]string, error) {
	fsys, _, err := b.view(bucket)
	if err != nil {
		return nil, err
	}
	if _, err := b.statObject(fsys, bucket, object); err != nil {
		return nil, err
	}
	return map[string]string{}, nil
}

// CreateBucket forks a new branch named bucket from main, or from the
// branch the X-Branchnfs-Parent header names (read by the server, see
// parentFromContext).
func (b *Backend) CreateBucket(ctx context.Context, in *s3.CreateBucketInput, _ []byte) error {
	name := deref(in.Bucket)
	if err := branches.CheckName(name); err != nil {
		return apiErr("InvalidBucketName", http.StatusBadRequest, "%q is not a branch name: want 1-64 of A-Z a-z 0-9 . _ -", name)
	}
	if strings.Contains(name, CheckpointSep) {
		return apiErr("InvalidBucketName", http.StatusBadRequest, "%q: names with %q are the read-only buckets of checkpoints (BRANCH%sLABEL); fork a branch named without it", name, CheckpointSep, CheckpointSep)
	}
	parent := parentFromContext(ctx)
	if _, err := b.mgr.Fork(ctx, parent, name); err != nil {
		switch {
		case errors.Is(err, branches.ErrExists):
			return s3err.GetAPIError(s3err.ErrBucketAlreadyOwnedByYou)
		case errors.Is(err, branches.ErrNotFound), errors.Is(err, branches.ErrInvalidated):
			return apiErr("NoSuchBucket", http.StatusNotFound, "cannot fork %q: parent branch %q: %v", name, parent, err)
		case errors.Is(err, branches.ErrReadOnly):
			return apiErr("AccessDenied", http.StatusForbidden, "cannot fork %q: %v", name, err)
		}
		return err
	}
	return nil
}

// DeleteBucket aborts the branch (and its descendants, as branchnfs abort
// does). main cannot be aborted: AccessDenied.
func (b *Backend) DeleteBucket(ctx context.Context, bucket string) error {
	if _, _, err := b.view(bucket); err != nil {
		return err
	}
	if b.isCheckpoint(bucket) {
		return apiErr("AccessDenied", http.StatusForbidden, "bucket %q is a checkpoint: checkpoints are read-only and go with their branch", bucket)
	}
	if _, err := b.mgr.Abort(ctx, bucket); err != nil {
		switch {
		case errors.Is(err, branches.ErrReadOnly):
			return apiErr("AccessDenied", http.StatusForbidden, "cannot delete bucket %q: %v", bucket, err)
		case errors.Is(err, branches.ErrNotFound), errors.Is(err, branches.ErrInvalidated):
			return bucketErr(bucket, err)
		}
		return err
	}
	return nil
}

// checkKey refuses keys that are no clean relative path.
func checkKey(key string) error {
	k := strings.TrimSuffix(key, "/")
	if k == "" {
		return apiErr("InvalidArgument", http.StatusBadRequest, "empty key")
	}
	for _, seg := range strings.Split(k, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return apiErr("InvalidArgument", http.StatusBadRequest,
				"key %q has an empty, \".\" or \"..\" segment: keys are paths of the branch (a/b/c)", key)
		}
		if hidden(seg) {
			return apiErr("InvalidArgument", http.StatusBadRequest, "key %q: names starting with %q are reserved", key, TempPrefix)
		}
	}
	return nil
}

// statObject returns the attributes of the regular file at key.
func (b *Backend) statObject(fsys *cowfs.Billy, bucket, key string) (cowfs.Attr, error) {
	if err := checkKey(key); err != nil {
		return cowfs.Attr{}, err
	}
	if strings.HasSuffix(key, "/") {
		return cowfs.Attr{}, s3err.GetAPIError(s3err.ErrNoSuchKey)
	}
	fi, err := fsys.Stat(key)
	if err != nil {
		return cowfs.Attr{}, fsErr(bucket, key, err)
	}
	a := *fi.Sys().(*cowfs.Attr)
	if a.Type != cowfs.TypeRegular {
		return cowfs.Attr{}, s3err.GetAPIError(s3err.ErrNoSuchKey)
	}
	return a, nil
}

// owner returns the owner of directory dir, which new files and
// directories under it take.
func owner(fsys *cowfs.Billy, dir string) (uid, gid int) {
	fi, err := fsys.Stat(dir)
	if err != nil {
		return os.Getuid(), os.Getgid()
	}
	a := fi.Sys().(*cowfs.Attr)
	return int(a.UID), int(a.GID)
}

// mkdirAll makes dir and its missing parents, each owned as its parent is.
func mkdirAll(fsys *cowfs.Billy, dir string) error {
	if dir == "" || dir == "." {
		return nil
	}
	fi, err := fsys.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		return nil
	}
	if !errors.Is(err, syscall.ENOENT) {
		return err
	}
	parent := path.Dir(dir)
	if err := mkdirAll(fsys, parent); err != nil {
		return err
	}
	uid, gid := owner(fsys, parent)
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return fsys.Chown(dir, uid, gid)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func ptr[T any](v T) *T { return &v }

func sortBuckets(l []s3response.ListAllMyBucketsEntry) {
	slices.SortFunc(l, func(a, b s3response.ListAllMyBucketsEntry) int { return strings.Compare(a.Name, b.Name) })
}

// modTime is the Last-Modified of an object: HTTP dates have whole seconds.
func modTime(a cowfs.Attr) time.Time { return a.Mtime.UTC().Truncate(time.Second) }
