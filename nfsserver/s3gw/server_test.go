package s3gw_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/branches/branchestest"
	"github.com/branchnfs/branchnfs/nfsserver/s3gw"
)

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type env struct {
	mgr   *branches.Manager
	creds s3gw.Credentials
	addr  string
	c     *s3.Client
}

// start serves a fresh store's branches over S3, with branch b forked from
// main, and returns a client signed with the store's key.
func start(t testing.TB) *env {
	t.Helper()
	mgr := branchestest.NewManager(t, branches.Options{ReclaimDelay: -1})
	if _, err := mgr.Fork(context.Background(), "main", "b"); err != nil {
		t.Fatal(err)
	}
	creds, err := s3gw.EnsureCredentials(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := s3gw.New(s3gw.Options{Branches: mgr, Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(addr) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if i > 200 {
			t.Fatalf("the S3 server does not listen on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &env{mgr: mgr, creds: creds, addr: addr, c: client(addr, creds)}
}

func client(addr string, creds s3gw.Credentials) *s3.Client {
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String("http://" + addr),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, ""),
	})
}

func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

func (e *env) put(t *testing.T, bucket, key string, data []byte) string {
	t.Helper()
	out, err := e.c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(data)})
	if err != nil {
		t.Fatalf("put %s/%s: %v", bucket, key, err)
	}
	return aws.ToString(out.ETag)
}

func (e *env) get(t *testing.T, bucket, key string) []byte {
	t.Helper()
	out, err := e.c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatalf("get %s/%s: %v", bucket, key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPutGetThroughBranchFiles(t *testing.T) {
	e := start(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 300000) // 4.6 MB
	etag := e.put(t, "b", "dir/sub/file.bin", data)
	sum := md5.Sum(data)
	if etag != `"`+hex.EncodeToString(sum[:])+`"` {
		t.Errorf("ETag %s, want the MD5 %x", etag, sum)
	}
	if got := e.get(t, "b", "dir/sub/file.bin"); !bytes.Equal(got, data) {
		t.Fatalf("GET returned %d bytes that differ from the %d put", len(got), len(data))
	}
	// The branch's own files hold it; main does not.
	v, _, err := e.mgr.View("b")
	if err != nil {
		t.Fatal(err)
	}
	f, err := v.Billy().Open("dir/sub/file.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	if !bytes.Equal(got, data) {
		t.Fatal("the branch's file differs from what was put")
	}
	ents, err := v.Billy().ReadDir("dir/sub")
	if err != nil || len(ents) != 1 {
		t.Fatalf("dir/sub holds %d entries (%v), want only file.bin: no temporary left", len(ents), err)
	}
	if _, err := e.c.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("main"), Key: aws.String("dir/sub/file.bin")}); code(err) != "NotFound" {
		t.Errorf("HEAD in main: %v, want NotFound", err)
	}
	// The temporaries are on the ignore list: an upload's temporary (one
	// left by a crash, say) is not in the diff.
	tf, err := v.Billy().Create("dir/" + s3gw.TempPrefix + "put-0123")
	if err != nil {
		t.Fatal(err)
	}
	tf.Write([]byte("partial"))
	tf.Close()
	d, err := e.mgr.Diff(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range d.Changes {
		if strings.Contains(c.Path, s3gw.TempPrefix) {
			t.Errorf("diff shows the temporary %s", c.Path)
		}
	}
}

func TestRangesAndConditions(t *testing.T) {
	e := start(t)
	data := []byte("hello, branches of the world")
	etag := e.put(t, "b", "k", data)
	ctx := context.Background()
	for _, tc := range []struct {
		rng, want string
	}{
		{"bytes=0-4", "hello"},
		{"bytes=7-", "branches of the world"},
		{"bytes=-5", "world"},
		{"bytes=7-14", "branches"},
	} {
		out, err := e.c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("k"), Range: aws.String(tc.rng)})
		if err != nil {
			t.Fatalf("%s: %v", tc.rng, err)
		}
		b, _ := io.ReadAll(out.Body)
		out.Body.Close()
		if string(b) != tc.want {
			t.Errorf("%s: got %q, want %q", tc.rng, b, tc.want)
		}
	}
	if _, err := e.c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("k"), Range: aws.String("bytes=100-")}); code(err) != "InvalidRange" {
		t.Errorf("range past the end: %v, want InvalidRange", err)
	}
	if _, err := e.c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("k"), IfMatch: aws.String(etag)}); err != nil {
		t.Errorf("If-Match with the ETag: %v", err)
	}
	if _, err := e.c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("k"), IfMatch: aws.String(`"0000"`)}); code(err) != "PreconditionFailed" {
		t.Errorf("If-Match with another ETag: %v, want PreconditionFailed", err)
	}
	_, err := e.c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("k"), IfNoneMatch: aws.String(etag)})
	_ = err
	var re *smithyHTTPError
	if !asStatus(err, http.StatusNotModified, &re) {
		t.Errorf("If-None-Match with the ETag: %v, want 304", err)
	}
	// An NFS client sets the file's mtime two hours back.
	v, _, err := e.mgr.View("b")
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := v.Billy().Chtimes("k", old, old); err != nil {
		t.Fatal(err)
	}
	if !asStatus(getSince(e, time.Now().Add(-time.Hour)), http.StatusNotModified, &re) {
		t.Errorf("If-Modified-Since after the mtime: want 304")
	}
	if err := getSince(e, time.Now().Add(-3*time.Hour)); err != nil {
		t.Errorf("If-Modified-Since before the write: %v", err)
	}
}

type smithyHTTPError = struct{}

func getSince(e *env, t time.Time) error {
	out, err := e.c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("k"), IfModifiedSince: &t})
	if err == nil {
		out.Body.Close()
	}
	return err
}

func asStatus(err error, status int, _ **smithyHTTPError) bool {
	var re interface{ HTTPStatusCode() int }
	return errors.As(err, &re) && re.HTTPStatusCode() == status
}

func TestListObjectsV2(t *testing.T) {
	e := start(t)
	for _, k := range []string{"a-b", "a/b", "a/c/d", "a0", "b/x", "b/y", "c"} {
		e.put(t, "b", k, []byte(k))
	}
	// A key below a file cannot be: the error says so.
	_, err := e.c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("c/d"), Body: strings.NewReader("x")})
	if err == nil || !strings.Contains(err.Error(), "is a file") {
		t.Errorf("put below a file: %v, want an error saying a parent is a file", err)
	}
	ctx := context.Background()
	list := func(in s3.ListObjectsV2Input) (ks, ps []string, next *string) {
		t.Helper()
		in.Bucket = aws.String("b")
		out, err := e.c.ListObjectsV2(ctx, &in)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range out.Contents {
			ks = append(ks, *o.Key)
		}
		for _, p := range out.CommonPrefixes {
			ps = append(ps, *p.Prefix)
		}
		return ks, ps, out.NextContinuationToken
	}
	eq := func(what string, got []string, want ...string) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: got %q, want %q", what, got, want)
		}
	}
	ks, ps, _ := list(s3.ListObjectsV2Input{})
	eq("all keys in byte order", ks, "a-b", "a/b", "a/c/d", "a0", "b/x", "b/y", "c")
	eq("no prefixes", ps)
	ks, ps, _ = list(s3.ListObjectsV2Input{Delimiter: aws.String("/")})
	eq("top keys", ks, "a-b", "a0", "c")
	eq("top prefixes", ps, "a/", "b/")
	ks, ps, _ = list(s3.ListObjectsV2Input{Delimiter: aws.String("/"), Prefix: aws.String("a/")})
	eq("keys under a/", ks, "a/b")
	eq("prefixes under a/", ps, "a/c/")
	ks, _, _ = list(s3.ListObjectsV2Input{StartAfter: aws.String("a/b")})
	eq("start-after", ks, "a/c/d", "a0", "b/x", "b/y", "c")
	ks, _, _ = list(s3.ListObjectsV2Input{Prefix: aws.String("a")})
	eq("prefix a", ks, "a-b", "a/b", "a/c/d", "a0")
	// Paging with a delimiter: prefixes are not repeated.
	var all []string
	var tok *string
	for i := 0; i < 10; i++ {
		ks, ps, next := list(s3.ListObjectsV2Input{Delimiter: aws.String("/"), MaxKeys: aws.Int32(1), ContinuationToken: tok})
		all = append(all, ks...)
		all = append(all, ps...)
		if next == nil {
			break
		}
		tok = next
	}
	eq("paged by one", all, "a-b", "a/", "a0", "b/", "c")
	all, tok = nil, nil
	for i := 0; i < 10; i++ {
		ks, _, next := list(s3.ListObjectsV2Input{MaxKeys: aws.Int32(3), ContinuationToken: tok})
		all = append(all, ks...)
		if next == nil {
			break
		}
		tok = next
	}
	eq("paged by three", all, "a-b", "a/b", "a/c/d", "a0", "b/x", "b/y", "c")
}

func TestDeleteAndBuckets(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	e.put(t, "b", "x/y/z", []byte("1"))
	e.put(t, "b", "x/w", []byte("2"))
	if _, err := e.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("b"), Key: aws.String("x/y/z")}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("b"), Key: aws.String("missing")}); err != nil {
		t.Errorf("delete of a missing key: %v, want success", err)
	}
	out, err := e.c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("b"), Delimiter: aws.String("/"), Prefix: aws.String("x/")})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.CommonPrefixes) != 0 || len(out.Contents) != 1 {
		t.Errorf("after deleting x/y/z: %d prefixes, %d keys; want x/y/ gone and x/w left", len(out.CommonPrefixes), len(out.Contents))
	}
	res, err := e.c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("b"), Delete: &types.Delete{Objects: []types.ObjectIdentifier{{Key: aws.String("x/w")}, {Key: aws.String("../etc")}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Deleted) != 1 || len(res.Errors) != 1 {
		t.Errorf("DeleteObjects: %d deleted, %d errors; want 1 and 1 (the bad key)", len(res.Deleted), len(res.Errors))
	}
	lb, err := e.c.ListBuckets(ctx, &s3.ListBucketsInput{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range lb.Buckets {
		names = append(names, *b.Name)
	}
	if fmt.Sprint(names) != "[b main]" {
		t.Errorf("ListBuckets: %v, want [b main]", names)
	}
	if _, err := e.c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("nope")}); code(err) != "NotFound" {
		t.Errorf("HeadBucket of no branch: %v", err)
	}
	if _, err := e.c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("nope"), Key: aws.String("k")}); code(err) != "NoSuchBucket" {
		t.Errorf("GET in no branch: %v, want NoSuchBucket", err)
	}
}

func TestInvalidatedBranchIsNoSuchBucket(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	if _, err := e.mgr.Fork(ctx, "main", "c"); err != nil {
		t.Fatal(err)
	}
	e.put(t, "b", "f", []byte("b"))
	e.put(t, "c", "f", []byte("c"))
	if _, err := e.mgr.Commit(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	_, err := e.c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("c"), Key: aws.String("f")})
	if code(err) != "NoSuchBucket" || !strings.Contains(err.Error(), "invalidated") {
		t.Errorf("GET in an invalidated branch: %v, want NoSuchBucket saying it was invalidated", err)
	}
	if got := e.get(t, "main", "f"); string(got) != "b" {
		t.Errorf("main after the commit: %q", got)
	}
}

func TestAnonymousAndWrongKeyRefused(t *testing.T) {
	e := start(t)
	resp, err := http.Get("http://" + e.addr + "/main/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("anonymous list: %s, want 403", resp.Status)
	}
	req, _ := http.NewRequest(http.MethodPut, "http://"+e.addr+"/main/anon", strings.NewReader("x"))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("anonymous put: %s, want 403", resp.Status)
	}
	bad := client(e.addr, s3gw.Credentials{AccessKeyID: e.creds.AccessKeyID, SecretAccessKey: "wrong" + e.creds.SecretAccessKey})
	if _, err := bad.ListBuckets(context.Background(), &s3.ListBucketsInput{}); code(err) != "SignatureDoesNotMatch" {
		t.Errorf("wrong secret: %v, want SignatureDoesNotMatch", err)
	}
}

func TestMultipartAndCopy(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	mp, err := e.c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("m/obj")})
	if err != nil {
		t.Fatal(err)
	}
	p1 := bytes.Repeat([]byte{1, 2, 3, 4}, 5<<20/4)
	p2 := []byte("tail")
	var parts []types.CompletedPart
	var sums []byte
	for i, p := range [][]byte{p1, p2} {
		out, err := e.c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String("m/obj"), UploadId: mp.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(p)})
		if err != nil {
			t.Fatal(err)
		}
		s := md5.Sum(p)
		sums = append(sums, s[:]...)
		parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: out.ETag})
	}
	// Staged parts are hidden from listings and from the diff.
	l, err := e.c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("b")})
	if err != nil || len(l.Contents) != 0 {
		t.Fatalf("listing during the upload: %v, %d keys; want none", err, len(l.Contents))
	}
	if d, err := e.mgr.Diff(ctx, "b"); err != nil || len(d.Changes) != 0 {
		t.Fatalf("diff during the upload: %v %v; want nothing", d.Changes, err)
	}
	lp, err := e.c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("b"), Key: aws.String("m/obj"), UploadId: mp.UploadId})
	if err != nil || len(lp.Parts) != 2 {
		t.Fatalf("ListParts: %v, %d parts", err, len(lp.Parts))
	}
	done, err := e.c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("m/obj"), UploadId: mp.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	if err != nil {
		t.Fatal(err)
	}
	want := md5.Sum(sums)
	if got := aws.ToString(done.ETag); got != fmt.Sprintf(`"%x-2"`, want) {
		t.Errorf("multipart ETag %s, want S3's form %x-2", got, want)
	}
	if got := e.get(t, "b", "m/obj"); !bytes.Equal(got, append(append([]byte{}, p1...), p2...)) {
		t.Fatalf("joined object: %d bytes differ from the parts", len(got))
	}
	v, _, _ := e.mgr.View("b")
	if ents, _ := v.Billy().ReadDir("/"); len(ents) != 1 {
		t.Errorf("the branch's root holds %d entries after Complete, want only m", len(ents))
	}
	if _, err := e.c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("main"), Key: aws.String("copied"), CopySource: aws.String("b/m/obj")}); code(err) != "AccessDenied" && err != nil {
		t.Logf("copy into main: %v", err)
	}
	if _, err := e.c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("b"), Key: aws.String("c/copy"), CopySource: aws.String("b/m/obj")}); err != nil {
		t.Fatal(err)
	}
	if got := e.get(t, "b", "c/copy"); len(got) != len(p1)+len(p2) {
		t.Fatalf("copy holds %d bytes", len(got))
	}
	// An aborted upload leaves nothing.
	mp2, err := e.c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("gone")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String("gone"), UploadId: mp2.UploadId, PartNumber: aws.Int32(1), Body: bytes.NewReader(p2)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("gone"), UploadId: mp2.UploadId}); err != nil {
		t.Fatal(err)
	}
	if ents, _ := v.Billy().ReadDir("/"); len(ents) != 2 {
		t.Errorf("the branch's root holds %d entries after Abort, want m and c", len(ents))
	}
}

func TestCreateAndDeleteBucket(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	e.put(t, "b", "from-b", []byte("x"))
	if _, err := e.c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("child")}, func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, addHeader(s3gw.ParentHeader, "b"))
	}); err != nil {
		t.Fatal(err)
	}
	info, err := e.mgr.Get(ctx, "child")
	if err != nil || info.Parent != "b" {
		t.Fatalf("child: %+v %v, want a fork of b", info, err)
	}
	if got := e.get(t, "child", "from-b"); string(got) != "x" {
		t.Errorf("child sees %q", got)
	}
	if _, err := e.c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("c2")}); err != nil {
		t.Fatal(err)
	}
	if info, _ := e.mgr.Get(ctx, "c2"); info.Parent != "main" {
		t.Errorf("c2 forked from %q, want main", info.Parent)
	}
	if _, err := e.c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("c2")}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mgr.Get(ctx, "c2"); err == nil {
		t.Errorf("c2 still live after DeleteBucket")
	}
	if _, err := e.c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("main")}); code(err) != "AccessDenied" {
		t.Errorf("DeleteBucket main: %v, want AccessDenied", err)
	}
}

// TestCommitAppearsWhole lists main in a loop while a branch that wrote
// many keys in many directories is committed into it (by a merge: main
// changed meanwhile): every listing shows all of the branch's keys or
// none.
func TestCommitAppearsWhole(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	// The branch adds keys to directories main has: a listing of main
	// reads them one after the other.
	const dirs, n = 24, 480
	for i := 0; i < dirs; i++ {
		e.put(t, "main", fmt.Sprintf("d%02d/base", i), []byte{byte(i)})
	}
	if _, err := e.mgr.Fork(ctx, "main", "big"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		e.put(t, "big", fmt.Sprintf("d%02d/k%03d", i%dirs, i), []byte{byte(i)})
	}
	// main changes after the fork, so the commit merges.
	e.put(t, "main", "zz/main-side", []byte("m"))
	old, want := dirs+1, dirs+1+n
	stop := make(chan struct{})
	seen := make(chan []int, 1)
	go func() {
		var counts []int
		defer func() { seen <- counts }()
		for after := 0; after < 20; {
			select {
			case <-stop:
				after++
			default:
			}
			out, err := e.c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("main")})
			if err != nil {
				t.Error(err)
				return
			}
			counts = append(counts, len(out.Contents))
		}
	}()
	time.Sleep(20 * time.Millisecond)
	res, err := e.mgr.Commit(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	if res.FastPath {
		t.Fatal("the commit took the fast path; the test wants a merge")
	}
	close(stop)
	counts := <-seen
	var before, after int
	for _, c := range counts {
		switch c {
		case old:
			before++
		case want:
			after++
		default:
			t.Fatalf("a listing during the commit saw %d keys: part of the commit (want %d or %d)", c, old, want)
		}
	}
	if after == 0 {
		t.Fatalf("no listing saw the commit (%d listings before it)", before)
	}
	t.Logf("%d listings before the commit, %d after", before, after)
}

func TestCheckpointBuckets(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	e.put(t, "b", "f", []byte("v1"))
	if _, err := e.mgr.Checkpoint(ctx, "b", "v1"); err != nil {
		t.Fatal(err)
	}
	e.put(t, "b", "f", []byte("v2"))
	if got := e.get(t, "b--v1", "f"); string(got) != "v1" {
		t.Errorf("checkpoint bucket holds %q, want v1", got)
	}
	if got := e.get(t, "b", "f"); string(got) != "v2" {
		t.Errorf("branch holds %q, want v2", got)
	}
	_, err := e.c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b--v1"), Key: aws.String("g"), Body: strings.NewReader("x")})
	if code(err) != "AccessDenied" {
		t.Errorf("put into a checkpoint: %v, want AccessDenied", err)
	}
	if _, err := e.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("b--v1"), Key: aws.String("f")}); code(err) != "AccessDenied" {
		t.Errorf("delete in a checkpoint: %v, want AccessDenied", err)
	}
	if _, err := e.c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("b--v1")}); code(err) != "AccessDenied" {
		t.Errorf("DeleteBucket of a checkpoint: %v, want AccessDenied", err)
	}
	if _, err := e.c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("x--y")}); code(err) != "InvalidBucketName" {
		t.Errorf("CreateBucket x--y: %v, want InvalidBucketName", err)
	}
	if _, err := e.c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("b--nope")}); code(err) != "NotFound" {
		t.Errorf("HeadBucket of no checkpoint: %v", err)
	}
	lb, err := e.c.ListBuckets(ctx, &s3.ListBucketsInput{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range lb.Buckets {
		names = append(names, *b.Name)
	}
	if fmt.Sprint(names) != "[b b--v1 main]" {
		t.Errorf("ListBuckets: %v, want [b b--v1 main]", names)
	}
}

// TestConcurrentPutsAndDeletes puts and deletes keys of one directory at
// once: deletes remove the directory they empty, puts make it again, and
// no request fails.
func TestConcurrentPutsAndDeletes(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	errs := make(chan error, 8)
	for w := 0; w < 4; w++ {
		go func(w int) {
			var err error
			for i := 0; i < 50 && err == nil; i++ {
				key := fmt.Sprintf("shared/dir/w%d", w)
				if _, err = e.c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: &key, Body: strings.NewReader("x")}); err != nil {
					break
				}
				_, err = e.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("b"), Key: &key})
			}
			errs <- err
		}(w)
	}
	for w := 0; w < 4; w++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	v, _, _ := e.mgr.View("b")
	if ents, err := v.Billy().ReadDir("/"); err != nil || len(ents) != 0 {
		t.Errorf("the branch holds %d entries after every key was deleted (%v), want none", len(ents), err)
	}
}
