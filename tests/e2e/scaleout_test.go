package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/internal/testbin"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/branchnfs/branchnfs/kv/etcdkv/etcdtest"
)

// scaleout is what several servers share: a 3-member etcd cluster (in
// this process) and a versitygw bucket, with the URLs that put a store's
// metadata and blocks on them.
type scaleout struct {
	cluster *etcdtest.Cluster
	s3      *testbin.S3Server
	meta    string // etcd://member,member,member/prefix
	blocks  string // s3://bucket/p/?endpoint=...
}

// startScaleout starts the cluster and the bucket, and sets the S3
// credentials in the environment of the processes the test starts.
func startScaleout(t *testing.T, prefix string) *scaleout {
	t.Helper()
	cluster := etcdtest.StartCluster(t, etcdtest.Options{})
	s3 := testbin.StartS3(t)
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	var hosts []string
	for _, ep := range cluster.Endpoints {
		hosts = append(hosts, strings.TrimPrefix(ep, "http://"))
	}
	return &scaleout{cluster: cluster, s3: s3,
		meta:   "etcd://" + strings.Join(hosts, ",") + prefix,
		blocks: fmt.Sprintf("s3://%s/p/?endpoint=%s&insecure=1&region=us-east-1", s3.Bucket, s3.Endpoint)}
}

// TestServeOnEtcdAndS3 runs one real server, as a regular user, with its
// metadata on a 3-member etcd cluster (in this process) and its blocks in
// versitygw: init records the backend, fork, writes through NFS and
// commit work; a SIGKILL in the middle of writes loses no acknowledged
// byte; with S3 stopped a write fails with NFS3ERR_IO and stores nothing,
// and works again once S3 is back; gc deletes an aborted branch's blobs
// and keeps main's. The blocks are in the bucket, not in etcd.
func TestServeOnEtcdAndS3(t *testing.T) {
	const prefix = "/scaleout/"
	so := startScaleout(t, prefix)
	cluster, s3, meta, blocksURL := so.cluster, so.s3, so.meta, so.blocks
	store := newStore(t)
	mustCLI(t, store, "init", "--meta", meta, "--blocks", blocksURL, "--blocks-retry", "2s")
	srv := startServer(t, store, 0)
	mustCLI(t, store, "fork", "main", "b1")

	r := rand.New(rand.NewPCG(11, 12))
	data := func(n int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(r.IntN(256))
		}
		return p
	}
	c := dial(t, srv.port)
	tg, _ := c.mount(t, "/b1")
	first := data(200 << 10)
	writeFile(t, tg, "first.bin", first)
	mustCLI(t, store, "commit", "--force", "b1")
	// By now the banner is out (printed after the control API starts).
	if want := "metadata in " + meta + ", blocks in " + blocksURL; !strings.Contains(srv.out.String(), want) {
		t.Fatalf("the server's banner does not say %q:\n%s", want, srv.out.String())
	}
	mustCLI(t, store, "fork", "main", "b2")

	// Writes on their own connection; the server is killed after a few
	// were acknowledged.
	acked := map[string][]byte{}
	var mu sync.Mutex
	wc := dial(t, srv.port)
	wtg, _ := wc.mount(t, "/b2")
	enough := make(chan struct{})
	done := make(chan struct{})
	files := make([][]byte, 64)
	for i := range files {
		files[i] = data(100<<10 + i*1000)
	}
	go func() {
		defer close(done)
		for i, p := range files {
			name := fmt.Sprintf("w%02d.bin", i)
			f, err := wtg.OpenFile(name, 0o644)
			if err != nil {
				return
			}
			if _, err := f.Write(p); err != nil {
				return
			}
			if err := f.Close(); err != nil {
				return
			}
			mu.Lock()
			acked[name] = p
			n := len(acked)
			mu.Unlock()
			if n == 4 {
				close(enough)
			}
		}
	}()
	select {
	case <-enough:
	case <-done:
		t.Fatalf("the writes failed with the server up, after %d files", len(acked))
	}
	srv.kill(t)
	<-done
	mu.Lock()
	t.Logf("%d files acknowledged before the SIGKILL", len(acked))
	mu.Unlock()

	srv = startServer(t, store, 0)
	c = dial(t, srv.port)
	main, _ := c.mount(t, "/main")
	if got := mustRead(t, main, "first.bin"); !bytes.Equal(got, first) {
		t.Fatalf("main's first.bin after the restart: %d bytes, equal=%v", len(got), bytes.Equal(got, first))
	}
	b2, _ := c.mount(t, "/b2")
	for name, want := range acked {
		if got := mustRead(t, b2, name); blobs.Sum(got) != blobs.Sum(want) {
			t.Fatalf("%s after the SIGKILL: %d bytes, hash %s, want %d bytes, hash %s", name, len(got), blobs.Sum(got), len(want), blobs.Sum(want))
		}
	}

	// S3 down: a write answers NFS3ERR_JUKEBOX (try again later) and
	// stores nothing.
	s3.Stop(t)
	f, err := b2.OpenFile("outage.bin", 0o644)
	if err != nil {
		t.Fatalf("create during the S3 outage (metadata only): %v", err)
	}
	_, err = f.Write(data(64 << 10))
	if err == nil {
		err = f.Close()
	}
	// go-nfs-client has no name for NFS3ERR_JUKEBOX and answers
	// os.ErrInvalid; the server's log says which answer it gave.
	if !errors.Is(err, os.ErrInvalid) {
		t.Fatalf("write with S3 stopped: %v, want the error go-nfs-client gives NFS3ERR_JUKEBOX (%v)", err, os.ErrInvalid)
	}
	// The log reaches the test through a pipe: wait for the line.
	eventually(t, "the server's log", func() error {
		if out := srv.out.String(); !strings.Contains(out, s3.Endpoint) || !strings.Contains(out, "the client is told to try again later") {
			return fmt.Errorf("it does not say it answered try-again-later naming the S3 endpoint %s:\n%s", s3.Endpoint, out)
		}
		return nil
	})
	s3.Start(t)
	after := data(150 << 10)
	writeFile(t, b2, "outage.bin", after)
	if got := mustRead(t, b2, "outage.bin"); !bytes.Equal(got, after) {
		t.Fatal("outage.bin written after S3 came back reads differently")
	}
	for name, want := range acked {
		if got := mustRead(t, b2, name); !bytes.Equal(got, want) {
			t.Fatalf("%s after the outage reads differently", name)
		}
	}
	mustCLI(t, store, "commit", "--force", "b2")

	// gc deletes the blobs of an aborted branch from the bucket and
	// keeps every block main uses. A first gc rechunks what main holds
	// (chunks replace its blocks in the bucket), so that the count
	// before the abort is of what the second one may keep.
	mustCLI(t, store, "gc")
	mustCLI(t, store, "fork", "main", "b3")
	b3, _ := c.mount(t, "/b3")
	writeFile(t, b3, "discarded.bin", data(300<<10))
	before := countObjects(t, s3.BucketDir())
	mustCLI(t, store, "abort", "--force", "b3")
	mustCLI(t, store, "gc")
	if after := countObjects(t, s3.BucketDir()); after >= before {
		t.Fatalf("gc left %d objects in the bucket, %d before the abort of b3", after, before)
	}
	main, _ = c.mount(t, "/main")
	for name, want := range acked {
		if got := mustRead(t, main, name); !bytes.Equal(got, want) {
			t.Fatalf("main's %s after gc reads differently", name)
		}
	}
	if got := mustRead(t, main, "first.bin"); !bytes.Equal(got, first) {
		t.Fatal("main's first.bin after gc reads differently")
	}
	srv.stop(t)

	// The metadata is in etcd and holds no block content; the blocks
	// are in the bucket.
	st := cluster.NewStore(t, etcdkv.Options{Prefix: prefix})
	var content, refs int
	err = st.View(context.Background(), func(tx kv.Txn) error {
		return tx.Iterate(nil, nil, true, func(k, _ []byte) (bool, error) {
			switch {
			case k[0] == 'c':
				content++
			case k[0] == 'l' && (len(k) == 26 || len(k) == 27 && k[26] == 'x') && k[9] == 'd': // blocks and extents
				refs++
			}
			return true, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if content != 0 || refs == 0 {
		t.Fatalf("etcd holds %d content keys and %d block references; want none and some", content, refs)
	}
	code, out, _ := cli(t, store, "list")
	if code != 0 || !strings.Contains(out, "main") {
		t.Fatalf("list with no server (store opened from backend.json): exit %d: %s", code, out)
	}
}

// countObjects counts the files under a versitygw bucket directory.
func countObjects(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
