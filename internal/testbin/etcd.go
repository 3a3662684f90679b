package testbin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// EtcdMember is the import path of the command that runs one etcd member
// as its own process (the etcd server's embed package, as go.mod pins it).
const EtcdMember = "github.com/branchnfs/branchnfs/internal/testbin/etcdmember"

// EtcdCluster is an etcd cluster whose members are separate processes
// (internal/testbin/etcdmember) on loopback ports, each with its data
// in a directory of its own, so that one can be killed with SIGKILL and
// started again.
type EtcdCluster struct {
	// Endpoints are the members' client URLs (http://127.0.0.1:PORT).
	Endpoints []string
	// Out holds each member's output, across restarts.
	Out []*SyncBuffer

	args  [][]string
	user  User
	bin   string
	cmds  []*exec.Cmd
	dones []chan struct{}
}

// EtcdOptions configures LaunchEtcd.
type EtcdOptions struct {
	Members int  // default 3
	User    User // runs the members; must own Dir
	// QuotaBackendBytes is --quota-backend-bytes (0: etcd's 2 GiB).
	QuotaBackendBytes int64
	// Wait bounds how long the members may take to serve (default 60 s).
	Wait time.Duration
}

// LaunchEtcd starts a cluster of etcdmember processes (bin) with their
// data under dir and waits until every member serves clients. On error
// the members already started are stopped.
func LaunchEtcd(bin, dir string, o EtcdOptions) (*EtcdCluster, error) {
	if o.Members <= 0 {
		o.Members = 3
	}
	if o.Wait <= 0 {
		o.Wait = 60 * time.Second
	}
	var ls []net.Listener
	for range 2 * o.Members {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ls = append(ls, l)
	}
	c := &EtcdCluster{user: o.User, bin: bin}
	var initial []string
	for i := range o.Members {
		initial = append(initial, fmt.Sprintf("m%d=http://%s", i, ls[2*i].Addr()))
	}
	for i := range o.Members {
		name := fmt.Sprintf("m%d", i)
		client := "http://" + ls[2*i+1].Addr().String()
		c.Endpoints = append(c.Endpoints, client)
		args := []string{"--name", name, "--data-dir", filepath.Join(dir, name),
			"--peer-url", "http://" + ls[2*i].Addr().String(), "--client-url", client,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-token", "testbin-" + ls[0].Addr().String()}
		if o.QuotaBackendBytes > 0 {
			args = append(args, "--quota-backend-bytes", fmt.Sprint(o.QuotaBackendBytes))
		}
		c.args = append(c.args, args)
		c.Out = append(c.Out, &SyncBuffer{})
	}
	c.cmds = make([]*exec.Cmd, o.Members)
	c.dones = make([]chan struct{}, o.Members)
	for _, l := range ls {
		l.Close()
	}
	// A member is ready only once a majority runs: start them all, then
	// wait.
	for i := range o.Members {
		if err := c.launch(i); err != nil {
			c.StopAll()
			return nil, err
		}
	}
	for i := range o.Members {
		if err := c.waitReady(i, o.Wait); err != nil {
			c.StopAll()
			return nil, err
		}
	}
	return c, nil
}

func (c *EtcdCluster) launch(i int) error {
	if c.cmds[i] != nil {
		return fmt.Errorf("testbin: etcd member %d runs already", i)
	}
	cmd := exec.Command(c.bin, c.args[i]...)
	cmd.Stdout, cmd.Stderr = c.Out[i], c.Out[i]
	c.user.Apply(cmd)
	start := len(c.Out[i].String())
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testbin: start etcd member %d: %w", i, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	c.cmds[i], c.dones[i] = cmd, done
	c.Out[i].Write([]byte(fmt.Sprintf("--- started (output from byte %d)\n", start)))
	return nil
}

// waitReady waits until member i printed "ready" since it was last
// started.
func (c *EtcdCluster) waitReady(i int, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		out := c.Out[i].String()
		last := out[strings.LastIndex(out, "--- started"):]
		if strings.Contains(last, "\nready\n") {
			return nil
		}
		select {
		case <-c.dones[i]:
			c.cmds[i] = nil
			return fmt.Errorf("testbin: etcd member %d exited: %s", i, last)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testbin: etcd member %d does not serve after %v: %s", i, wait, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Start starts member i again (after Kill or Stop) from its data
// directory and waits until it serves.
func (c *EtcdCluster) Start(i int) error {
	if err := c.launch(i); err != nil {
		return err
	}
	return c.waitReady(i, 60*time.Second)
}

// Kill sends member i SIGKILL and waits for it to die.
func (c *EtcdCluster) Kill(i int) {
	if c.cmds[i] == nil {
		return
	}
	c.cmds[i].Process.Signal(syscall.SIGKILL)
	<-c.dones[i]
	c.cmds[i] = nil
}

// Stop stops member i (SIGTERM, then SIGKILL after 10 s).
func (c *EtcdCluster) Stop(i int) {
	if c.cmds[i] == nil {
		return
	}
	c.cmds[i].Process.Signal(syscall.SIGTERM)
	select {
	case <-c.dones[i]:
	case <-time.After(10 * time.Second):
		c.cmds[i].Process.Kill()
		<-c.dones[i]
	}
	c.cmds[i] = nil
}

// StopAll stops every running member, all at once (a leader waits for a
// follower to take over only while one runs).
func (c *EtcdCluster) StopAll() {
	for _, cmd := range c.cmds {
		if cmd != nil {
			cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for i := range c.cmds {
		c.Stop(i)
	}
}

// Running reports whether member i's process runs.
func (c *EtcdCluster) Running(i int) bool {
	if c.cmds[i] == nil {
		return false
	}
	select {
	case <-c.dones[i]:
		return false
	default:
		return true
	}
}

// Leader returns the index of the member that leads, as a running member
// tells through etcd's HTTP gateway (POST /v3/maintenance/status), or an
// error if none answers with a known leader.
func (c *EtcdCluster) Leader() (int, error) {
	type status struct {
		Header struct {
			MemberID string `json:"member_id"`
		} `json:"header"`
		Leader string `json:"leader"`
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	ids := map[string]int{}
	leader := ""
	var last error
	for i, ep := range c.Endpoints {
		if !c.Running(i) {
			continue
		}
		resp, err := hc.Post(ep+"/v3/maintenance/status", "application/json", bytes.NewReader([]byte("{}")))
		if err != nil {
			last = err
			continue
		}
		var st status
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			last = err
			continue
		}
		ids[st.Header.MemberID] = i
		if st.Leader != "" && st.Leader != "0" {
			leader = st.Leader
		}
	}
	if i, ok := ids[leader]; ok && leader != "" {
		return i, nil
	}
	return -1, fmt.Errorf("testbin: no running etcd member names a running leader (last error: %v)", last)
}

// StartEtcd builds internal/testbin/etcdmember into a directory every
// user can reach, starts a cluster of it as S3User (a server is no
// reason to run as root) and stops it when the test ends, logging the
// members' output if the test failed.
func StartEtcd(t testing.TB, o EtcdOptions) *EtcdCluster {
	t.Helper()
	dir := SharedTempDir(t, "branchnfs-etcd-") // the members' user reads it
	bin, err := Build(filepath.Join(dir, "bin"), "etcdmember", EtcdMember)
	if err != nil {
		t.Fatal(err)
	}
	o.User = S3User()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(data, int(o.User.UID), int(o.User.GID)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := LaunchEtcd(bin, data, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.StopAll()
		if t.Failed() {
			for i, out := range c.Out {
				t.Logf("etcd member %d output:\n%s", i, out.String())
			}
		}
	})
	return c
}
