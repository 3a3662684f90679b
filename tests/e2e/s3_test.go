package e2e

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/internal/testbin"
)

// s3Env runs the real S3 clients (Debian's awscli, python3-boto3 and
// rclone) as the store's owner against serve --s3.
type s3Env struct {
	t        *testing.T
	store    string
	srv      *server
	endpoint string
	home     string // the client user's home: .aws, files to upload
	owner    osUser
	key, sec string
}

// freeLoopbackPort returns a port that was free a moment ago.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func needTool(t *testing.T, path, pkg string) {
	t.Helper()
	_, err := os.Stat(path)
	testbin.Prerequisite(t, err == nil, path+" is missing", "apt-get install "+pkg)
}

func startS3(t *testing.T) *s3Env {
	t.Helper()
	needTool(t, "/usr/bin/aws", "awscli")
	store := newStore(t)
	port := freeLoopbackPort(t)
	srv := startServer(t, store, 0, "--s3", fmt.Sprintf("127.0.0.1:%d", port))
	e := &s3Env{t: t, store: store, srv: srv, endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), owner: storeOwner(store)}
	e.home = userDir(t, e.owner)
	creds := mustCLI(t, store, "s3", "credentials")
	if !strings.HasPrefix(creds, "[branchnfs]\naws_access_key_id = ") {
		t.Fatalf("s3 credentials printed %q, want an aws CLI profile", creds)
	}
	for _, l := range strings.Split(creds, "\n") {
		if k, v, ok := strings.Cut(l, " = "); ok {
			switch k {
			case "aws_access_key_id":
				e.key = v
			case "aws_secret_access_key":
				e.sec = v
			}
		}
	}
	fi, err := os.Stat(filepath.Join(store, "s3.credentials"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("STORE/s3.credentials: %v %v, want mode 0600", fi.Mode(), err)
	}
	e.write(".aws/credentials", []byte(creds))
	// README.md's configuration.
	e.write(".aws/config", []byte("[profile branchnfs]\nregion = us-east-1\ns3 =\n    addressing_style = path\n"))
	// Wait for the S3 port.
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if i > 300 {
			t.Fatalf("S3 port %d does not answer: %v\n%s", port, err, srv.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return e
}

// write writes a file under the client's home, owned by the client user.
func (e *s3Env) write(rel string, data []byte) string {
	e.t.Helper()
	p := filepath.Join(e.home, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		e.t.Fatal(err)
	}
	chownTree(e.t, e.home, e.owner)
	return p
}

// run runs a client as the store's owner and returns its output; it fails
// the test unless the client exits 0.
func (e *s3Env) run(name string, args ...string) string {
	e.t.Helper()
	out, err := e.try(name, args...)
	if err != nil {
		e.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func (e *s3Env) try(name string, args ...string) (string, error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if name == "aws" {
		args = append([]string{"--endpoint-url", e.endpoint}, args...)
	}
	cmd := exec.CommandContext(ctx, "/usr/bin/"+name, args...)
	cmd.Dir = e.home
	cmd.Env = []string{"HOME=" + e.home, "PATH=/usr/bin:/bin", "AWS_PROFILE=branchnfs", "PYTHONDONTWRITEBYTECODE=1",
		"S3_ENDPOINT=" + e.endpoint, "LANG=C.UTF-8",
		// rclone's remote "bnfs", as README.md configures it.
		"RCLONE_CONFIG_BNFS_TYPE=s3", "RCLONE_CONFIG_BNFS_PROVIDER=Other", "RCLONE_CONFIG_BNFS_ENDPOINT=" + e.endpoint,
		"RCLONE_CONFIG_BNFS_ACCESS_KEY_ID=" + e.key, "RCLONE_CONFIG_BNFS_SECRET_ACCESS_KEY=" + e.sec,
		"RCLONE_CONFIG_BNFS_REGION=us-east-1", "RCLONE_CONFIG_BNFS_FORCE_PATH_STYLE=true", "RCLONE_CONFIG=/dev/null"}
	runAs(cmd, e.owner)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func randBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// hashTree returns the MD5 of every regular file under root, by relative
// path.
func hashTree(t *testing.T, root string) map[string][16]byte {
	t.Helper()
	out := map[string][16]byte{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[filepath.ToSlash(rel)] = md5.Sum(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestS3AwsCLI: aws s3 cp (multipart above 8 MiB), sync (ListObjectsV2
// paging over more than 1000 keys) and rm --recursive, with every file
// checked by hash through S3 and through NFS; then the branch is
// committed and everything appears in main.
func TestS3AwsCLI(t *testing.T) {
	e := startS3(t)
	mustCLI(t, e.store, "fork", "main", "art")
	if out := e.run("aws", "s3", "ls"); !strings.Contains(out, " art\n") || !strings.Contains(out, " main\n") {
		t.Fatalf("aws s3 ls: %q, want the buckets art and main", out)
	}
	big := randBytes(t, 20<<20+12345)
	e.write("src/big.bin", big)
	const small = 1100
	for i := 0; i < small; i++ {
		e.write(fmt.Sprintf("src/tree/d%02d/f%04d.txt", i%7, i), []byte(fmt.Sprintf("file %d\n%s", i, randBytes(t, i%300))))
	}
	e.run("aws", "s3", "cp", "src/big.bin", "s3://art/big.bin")
	e.run("aws", "s3", "sync", "src/tree", "s3://art/tree")
	// A second sync finds nothing to do: listing (in pages of 1000) sees
	// every key with its size and time.
	if out := e.run("aws", "s3", "sync", "src/tree", "s3://art/tree"); strings.Contains(out, "upload:") {
		t.Errorf("a second sync uploaded again:\n%s", out)
	}
	// Back through S3, compared by hash.
	e.run("aws", "s3", "sync", "s3://art/", "back/")
	want := hashTree(t, filepath.Join(e.home, "src/tree"))
	got := hashTree(t, filepath.Join(e.home, "back/tree"))
	if len(got) != small || len(want) != small {
		t.Fatalf("downloaded %d files, want %d", len(got), small)
	}
	for k, h := range want {
		if got[k] != h {
			t.Fatalf("%s differs after the round trip", k)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(e.home, "back/big.bin")); !bytes.Equal(b, big) {
		t.Fatal("big.bin differs after the round trip")
	}
	// Through NFS: the branch's files are the objects.
	c := dial(t, e.srv.port)
	tg, _ := c.mount(t, "/art")
	if b := mustRead(t, tg, "big.bin"); md5.Sum(b) != md5.Sum(big) {
		t.Fatal("big.bin read over NFS differs")
	}
	if b := mustRead(t, tg, "tree/d03/f0010.txt"); md5.Sum(b) != want["d03/f0010.txt"] {
		t.Fatal("tree/d03/f0010.txt read over NFS differs")
	}
	// Written over NFS, read through S3.
	writeFile(t, tg, "from-nfs.txt", []byte("written over NFS\n"))
	if out := e.run("aws", "s3", "cp", "s3://art/from-nfs.txt", "-"); out != "written over NFS\n" {
		t.Errorf("S3 read of a file written over NFS: %q", out)
	}
	// Nothing of it in main yet.
	if out := e.run("aws", "s3", "ls", "--recursive", "s3://main/"); strings.TrimSpace(out) != "" {
		t.Fatalf("main holds objects before the commit:\n%s", out)
	}
	// The test still has /art mounted over NFS: --force.
	mustCLI(t, e.store, "commit", "--force", "art")
	out := e.run("aws", "s3", "ls", "--recursive", "s3://main/")
	if n := strings.Count(out, "\n"); n != small+2 {
		t.Errorf("main lists %d keys after the commit, want %d", n, small+2)
	}
	e.run("aws", "s3", "cp", "s3://main/big.bin", "main-big.bin")
	if b, _ := os.ReadFile(filepath.Join(e.home, "main-big.bin")); !bytes.Equal(b, big) {
		t.Fatal("big.bin differs in main")
	}
	// rm --recursive in a new branch empties the prefix, there only.
	mustCLI(t, e.store, "fork", "main", "cleanup")
	e.run("aws", "s3", "rm", "--recursive", "s3://cleanup/tree")
	if out := e.run("aws", "s3", "ls", "--recursive", "s3://cleanup/"); strings.Count(out, "\n") != 2 {
		t.Errorf("after rm --recursive: %q, want big.bin and from-nfs.txt", out)
	}
	if out := e.run("aws", "s3", "ls", "s3://main/tree/"); !strings.Contains(out, "PRE d00/") {
		t.Errorf("main lost tree/ when a branch removed it: %q", out)
	}
}

// TestS3AbortLeavesNothing: a branch written through S3 then aborted
// leaves nothing in main; DeleteBucket aborts too.
func TestS3AbortLeavesNothing(t *testing.T) {
	e := startS3(t)
	mustCLI(t, e.store, "fork", "main", "tmp")
	e.write("a/x.txt", []byte("x"))
	e.write("a/y/z.txt", []byte("z"))
	e.run("aws", "s3", "sync", "a", "s3://tmp/a")
	mustCLI(t, e.store, "abort", "tmp")
	if out := e.run("aws", "s3", "ls", "--recursive", "s3://main/"); strings.TrimSpace(out) != "" {
		t.Fatalf("main after the abort:\n%s", out)
	}
	out, err := e.try("aws", "s3", "ls", "s3://tmp/")
	if err == nil || !strings.Contains(out, "NoSuchBucket") {
		t.Errorf("listing an aborted branch: %v %q, want NoSuchBucket", err, out)
	}
	e.run("aws", "s3", "mb", "s3://made")
	e.run("aws", "s3", "cp", "a/x.txt", "s3://made/x.txt")
	e.run("aws", "s3", "rb", "--force", "s3://made")
	if _, ok := listBranches(t, e.store)["made"]; ok {
		if listBranches(t, e.store)["made"].State == "live" {
			t.Errorf("made is live after rb")
		}
	}
	if out := e.run("aws", "s3", "ls", "--recursive", "s3://main/"); strings.TrimSpace(out) != "" {
		t.Fatalf("main after rb:\n%s", out)
	}
	// Anonymous requests are refused.
	out, err = e.try("aws", "--no-sign-request", "s3", "ls", "s3://main/")
	if err == nil || !strings.Contains(out, "AccessDenied") {
		t.Errorf("anonymous listing: %v %q, want AccessDenied", err, out)
	}
	// SIGTERM stops the S3 API with the rest, cleanly.
	e.srv.stop(t)
}

// TestS3Boto3: ranges, conditional GETs, CopyObject and multipart with
// boto3.
func TestS3Boto3(t *testing.T) {
	e := startS3(t)
	_, err := os.Stat("/usr/bin/python3")
	have := err == nil && exec.Command("/usr/bin/python3", "-c", "import boto3").Run() == nil
	testbin.Prerequisite(t, have, "python3-boto3 is missing", "apt-get install python3-boto3")
	mustCLI(t, e.store, "fork", "main", "py")
	script := e.write("t.py", []byte(boto3Script))
	if out := e.run("python3", script); !strings.Contains(out, "boto3 OK") {
		t.Fatalf("boto3 script:\n%s", out)
	} else {
		t.Log(out)
	}
	// The multipart object, read over NFS, is the parts joined.
	c := dial(t, e.srv.port)
	tg, _ := c.mount(t, "/py")
	b := mustRead(t, tg, "mp/obj.bin")
	want := bytes.Repeat([]byte("0123456789abcdef"), (6<<20)/16)
	want = append(want, []byte("tail")...)
	if !bytes.Equal(b, want) {
		t.Fatalf("mp/obj.bin over NFS: %d bytes, differ from the parts", len(b))
	}
}

const boto3Script = `
import boto3, botocore, datetime, hashlib, os, sys
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"], region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}))
data = bytes(range(256)) * 1000
put = s3.put_object(Bucket="py", Key="r/data.bin", Body=data)
etag = put["ETag"]
assert etag == '"%s"' % hashlib.md5(data).hexdigest(), etag
def get(**kw):
    return s3.get_object(Bucket="py", Key="r/data.bin", **kw)
assert get(Range="bytes=10-19")["Body"].read() == data[10:20]
assert get(Range="bytes=-7")["Body"].read() == data[-7:]
r = get(Range="bytes=255000-")
assert r["Body"].read() == data[255000:] and r["ContentRange"] == "bytes 255000-255999/256000", r["ContentRange"]
def status(**kw):
    try:
        get(**kw)["Body"].read()
        return 200
    except botocore.exceptions.ClientError as e:
        return int(e.response["ResponseMetadata"]["HTTPStatusCode"])
assert status(IfMatch=etag) == 200
assert status(IfMatch='"00000000000000000000000000000000"') == 412
assert status(IfNoneMatch=etag) == 304
assert status(IfNoneMatch='"00000000000000000000000000000000"') == 200
past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
assert status(IfModifiedSince=past) == 200
h = s3.head_object(Bucket="py", Key="r/data.bin")
assert h["ContentLength"] == len(data) and h["ETag"] == etag
assert status(IfModifiedSince=h["LastModified"]) == 304
try:
    s3.get_object(Bucket="py", Key="r/data.bin", Range="bytes=999999-")
    raise SystemExit("range past the end answered")
except botocore.exceptions.ClientError as e:
    assert e.response["Error"]["Code"] == "InvalidRange", e.response["Error"]
# CopyObject within the branch.
c = s3.copy_object(Bucket="py", Key="r/copy.bin", CopySource={"Bucket": "py", "Key": "r/data.bin"})
assert c["CopyObjectResult"]["ETag"] == etag
assert s3.get_object(Bucket="py", Key="r/copy.bin")["Body"].read() == data
# Multipart: two parts of 3 MiB... S3 wants 5 MiB but the last: 6 MiB and a tail.
part1 = b"0123456789abcdef" * ((6 << 20) // 16)
mp = s3.create_multipart_upload(Bucket="py", Key="mp/obj.bin")
e1 = s3.upload_part(Bucket="py", Key="mp/obj.bin", UploadId=mp["UploadId"], PartNumber=1, Body=part1)["ETag"]
e2 = s3.upload_part(Bucket="py", Key="mp/obj.bin", UploadId=mp["UploadId"], PartNumber=2, Body=b"tail")["ETag"]
ups = s3.list_multipart_uploads(Bucket="py")["Uploads"]
assert [u["Key"] for u in ups] == ["mp/obj.bin"], ups
done = s3.complete_multipart_upload(Bucket="py", Key="mp/obj.bin", UploadId=mp["UploadId"],
    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
want = hashlib.md5(hashlib.md5(part1).digest() + hashlib.md5(b"tail").digest()).hexdigest() + "-2"
assert done["ETag"] == '"%s"' % want, (done["ETag"], want)
assert s3.get_object(Bucket="py", Key="mp/obj.bin")["Body"].read() == part1 + b"tail"
keys = [o["Key"] for o in s3.list_objects_v2(Bucket="py")["Contents"]]
assert keys == ["mp/obj.bin", "r/copy.bin", "r/data.bin"], keys
try:
    s3.get_object(Bucket="nosuch", Key="x")
    raise SystemExit("a missing bucket answered")
except botocore.exceptions.ClientError as e:
    assert e.response["Error"]["Code"] == "NoSuchBucket", e.response["Error"]
print("boto3 OK")
`

// TestS3Rclone: rclone copy and check against a local folder (check
// compares MD5s: the ETags of single-part uploads).
func TestS3Rclone(t *testing.T) {
	e := startS3(t)
	needTool(t, "/usr/bin/rclone", "rclone")
	mustCLI(t, e.store, "fork", "main", "rc")
	for i := 0; i < 40; i++ {
		e.write(fmt.Sprintf("local/d%d/f%02d.bin", i%4, i), randBytes(t, 1000*i+1))
	}
	e.write("local/big.bin", randBytes(t, 3<<20))
	e.run("rclone", "copy", "local", "bnfs:rc/data")
	out := e.run("rclone", "check", "local", "bnfs:rc/data")
	t.Log(out)
	if !strings.Contains(out, "0 differences found") || strings.Contains(out, "hashes could not be checked") {
		t.Errorf("rclone check: want no differences and every hash checked:\n%s", out)
	}
	// A change made over NFS is seen by check.
	c := dial(t, e.srv.port)
	tg, _ := c.mount(t, "/rc")
	writeFile(t, tg, "data/d1/f01.bin", []byte("changed over NFS"))
	if out, err := e.try("rclone", "check", "local", "bnfs:rc/data"); err == nil {
		t.Errorf("rclone check passed after a change over NFS:\n%s", out)
	}
}
