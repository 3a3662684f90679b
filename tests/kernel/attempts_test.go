package kernel

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/branchnfs/branchnfs/internal/testbin"
	"github.com/branchnfs/branchnfs/nfsserver/control"
)

// TestKernelAttempts runs testdata/attempts.sh: exec, race and a timeout
// run by branchnfs inside the guest, in a kernel mount of the export /,
// supervising process trees that double-fork and keep writing.
func TestKernelAttempts(t *testing.T) {
	img, helper, srv := setup(t)
	if !srv.isBranchnfs() {
		t.Skip("attempt scenarios need the real branchnfs server (BRANCHNFS_KERNEL_SERVER is set)")
	}
	bin, _, err := buildBinaries()
	if err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) hostAction {
		return func(extra []string) error {
			_, err := srv.cli(append(args, extra...)...)
			return err
		}
	}
	actions := map[string]hostAction{
		"fork": cli("fork"),
		// The guest's mount uses the branch: an abort from elsewhere must
		// be forced.
		"abort": cli("abort", "--force"),
	}
	opts, err := srv.linuxMountOptions("main")
	if err != nil {
		t.Fatal(err)
	}
	token, err := control.ReadToken(control.TokenPath(srv.store))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"MOUNT_OPTS":              opts,
		"BRANCHNFS_CONTROL":       "tcp://10.0.2.2:" + strconv.Itoa(testbin.ForwardUnix(t, control.SocketPath(srv.store))),
		"BRANCHNFS_CONTROL_TOKEN": token,
	}
	runScenario(t, "attempts", srv, img, helper, env, actions, 8*time.Minute,
		guestFile{Path: "bin/branchnfs", Src: filepath.Clean(bin)})
}
