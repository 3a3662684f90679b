package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/internal/testbin"
	"github.com/branchnfs/branchnfs/nfsserver/control"
	nfs "github.com/willscott/go-nfs-client/nfs"
)

// TestEtcdMemberKilledMidCommit runs a real server, as a regular user,
// on a 3-member etcd cluster whose members are separate processes, and
// versitygw. A stream of rounds (fork main, write two files and
// overwrite a third over NFS, commit) runs; during one commit the etcd
// leader gets SIGKILL. Every commit either completes or fails with an
// error and the server lives on; no commit is half-applied (main holds
// both files of a round or neither, exactly for the rounds whose branch
// is committed, and "last" names the latest of them), both with the two
// remaining members and after the server and the killed member restart;
// and commits go on with two members. FSSTAT and status report etcd's
// quota, not the local disk.
func TestEtcdMemberKilledMidCommit(t *testing.T) {
	const quota = 1 << 30
	cluster := testbin.StartEtcd(t, testbin.EtcdOptions{QuotaBackendBytes: quota})
	s3 := testbin.StartS3(t)
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	var hosts []string
	for _, ep := range cluster.Endpoints {
		hosts = append(hosts, strings.TrimPrefix(ep, "http://"))
	}
	meta := "etcd://" + strings.Join(hosts, ",") + "/killmember/"
	blocksURL := fmt.Sprintf("s3://%s/k/?endpoint=%s&insecure=1&region=us-east-1", s3.Bucket, s3.Endpoint)
	store := newStore(t)
	mustCLI(t, store, "init", "--meta", meta, "--blocks", blocksURL, "--blocks-retry", "10s")
	srv := startServer(t, store, 0)
	ctx := context.Background()
	api, _, err := control.Dial(ctx, control.SocketPath(store), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { api.Close() }()
	nc := dial(t, srv.port)
	_, rootFH := nc.mount(t, "/main")
	fss, err := testbin.FSStatFH(nc.c, auth, rootFH)
	if err != nil {
		t.Fatal(err)
	}
	if fss.Tbytes != quota || fss.Fbytes == 0 || fss.Fbytes >= quota || fss.Abytes != fss.Fbytes || fss.Tfiles != quota {
		t.Fatalf("FSSTAT on etcd = %+v; want the quota %d as total bytes and files, and less free", fss, quota)
	}
	var status struct {
		Quota *struct {
			Limit int64 `json:"limit_bytes"`
			Used  int64 `json:"used_bytes"`
		} `json:"metadata_quota"`
		InObjectStore bool  `json:"blocks_in_object_store"`
		Disk          int64 `json:"disk_bytes"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, store, "status", "--json")), &status); err != nil {
		t.Fatal(err)
	}
	if status.Quota == nil || status.Quota.Limit != quota || status.Quota.Used <= 0 || !status.InObjectStore || status.Disk != -1 {
		t.Fatalf("status --json on etcd and S3: %+v (quota %+v); want the quota %d, some of it used, blocks in the object store, no local disk", status, status.Quota, quota)
	}
	if out := mustCLI(t, store, "status"); !strings.Contains(out, "quota") || !strings.Contains(out, "no size limit") {
		t.Fatalf("status on etcd and S3 says nothing of the quota or the bucket:\n%s", out)
	}

	const before, after, maxRounds = 4, 4, 24
	r := rand.New(rand.NewPCG(21, 22))
	type outcome struct {
		branch    string
		committed bool // the commit returned success
		err       error
	}
	var rounds []outcome
	killed, okAfter := -1, 0
	// round runs fork, writes and commit of round i; kill, if not nil,
	// runs while the commit is in flight.
	round := func(i int, kill func(chan error)) outcome {
		o := outcome{branch: fmt.Sprintf("r%02d", i)}
		if _, o.err = api.Fork(ctx, "main", o.branch); o.err != nil {
			return o
		}
		tg, _ := nc.mount(t, "/"+o.branch)
		for _, f := range []struct{ name, data string }{
			{fmt.Sprintf("a%02d", i), strings.Repeat("a", 40<<10) + o.branch},
			{fmt.Sprintf("b%02d", i), o.branch},
			{"last", strconv.Itoa(i)},
		} {
			w, err := tg.OpenFile(f.name, 0o644)
			if err == nil {
				_, err = w.Write([]byte(f.data))
				if cerr := w.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				o.err = fmt.Errorf("write %s: %w", f.name, err)
				return o
			}
		}
		res := make(chan error, 1)
		go func() {
			_, err := api.ForceCommit(ctx, o.branch)
			res <- err
		}()
		if kill != nil {
			kill(res)
		}
		o.err = <-res
		o.committed = o.err == nil
		return o
	}
	for i := 0; i < maxRounds && okAfter < after; i++ {
		var kill func(res chan error)
		if i == before {
			kill = func(res chan error) {
				leader, err := cluster.Leader()
				if err != nil {
					t.Fatal(err)
				}
				// Somewhere in the commit: a commit of a few files takes
				// a few etcd round trips.
				time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
				inFlight := len(res) == 0
				cluster.Kill(leader)
				killed = leader
				t.Logf("round %d: SIGKILL to etcd member %d, the leader (the commit still in flight: %v)", i, leader, inFlight)
			}
		}
		o := round(i, kill)
		if o.err != nil {
			t.Logf("round %d: %v", i, o.err)
			if strings.TrimSpace(o.err.Error()) == "" {
				t.Fatalf("round %d failed with an empty error", i)
			}
		}
		srv.Alive(t, fmt.Sprintf("round %d", i))
		switch {
		case i < before && !o.committed:
			t.Fatalf("round %d failed with every etcd member up: %v", i, o.err)
		case i > before && o.committed:
			okAfter++
		}
		rounds = append(rounds, o)
	}
	if okAfter < after {
		t.Fatalf("only %d of %d rounds committed with two etcd members left", okAfter, len(rounds)-before-1)
	}

	// check compares main's tree with the rounds' outcomes and the
	// branches' states.
	check := func(when string) {
		t.Helper()
		c := dial(t, srv.port)
		main, _ := c.mount(t, "/main")
		infos := listBranches(t, store)
		latest := -1
		for i, o := range rounds {
			a, aerr := readFile(main, fmt.Sprintf("a%02d", i))
			b, berr := readFile(main, fmt.Sprintf("b%02d", i))
			for _, err := range []error{aerr, berr} {
				if err != nil && nfsStatus(err) != nfs.NFS3ErrNoEnt && !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s: reading round %d's files: %v", when, i, err)
				}
			}
			inMain := aerr == nil && berr == nil
			if (aerr == nil) != (berr == nil) {
				t.Fatalf("%s: round %d is half-applied: a present %v, b present %v", when, i, aerr == nil, berr == nil)
			}
			if inMain && (string(b) != o.branch || !strings.HasSuffix(string(a), o.branch)) {
				t.Fatalf("%s: round %d's files in main hold other content", when, i)
			}
			if o.committed && !inMain {
				t.Fatalf("%s: round %d's commit succeeded but main lacks its files", when, i)
			}
			info, forked := infos[o.branch]
			if forked && (info.State == branches.StateCommitted) != inMain {
				t.Fatalf("%s: round %d's branch is %s but its files in main: %v", when, i, info.State, inMain)
			}
			if !forked && inMain {
				t.Fatalf("%s: round %d was never forked but main has its files", when, i)
			}
			if inMain {
				latest = i
			}
		}
		last := mustRead(t, main, "last")
		if string(last) != strconv.Itoa(latest) {
			t.Fatalf("%s: main's last = %q, want %d (the latest committed round)", when, last, latest)
		}
	}
	check("with two etcd members")

	// Restart the server and the killed member: the same tree.
	api.Close()
	srv.stop(t)
	if err := cluster.Start(killed); err != nil {
		t.Fatal(err)
	}
	srv = startServer(t, store, 0)
	check("after restarting the server and the killed etcd member")
	mustCLI(t, store, "fork", "main", "afterwards")
	c := dial(t, srv.port)
	tg, _ := c.mount(t, "/afterwards")
	writeFile(t, tg, "z", []byte("z"))
	mustCLI(t, store, "commit", "--force", "afterwards")
}
