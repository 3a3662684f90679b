// Package kernel holds end-to-end tests of branchnfs through the real Linux
// kernel NFSv3 client.
//
// The tests boot a Debian kernel under qemu's software emulation (TCG; no KVM
// needed) with a small initramfs: static busybox, the NFS client modules, and
// the static helper in ./mounthelper. The guest image is built from Debian's
// packages (apt-get download, dpkg-deb -x; nothing is installed) and cached
// under $XDG_CACHE_HOME/branchnfs-kernel (default ~/.cache), or
// $BRANCHNFS_KERNEL_CACHE, keyed by kernel version.
//
// Each test starts the real branchnfs binary on a free loopback port, boots
// the guest once with a shell scenario from testdata/ appended to the
// initramfs, and reports every "step" of the scenario as a subtest. The guest
// reaches the host's 127.0.0.1 as 10.0.2.2 through qemu's user network. It
// reports results, and asks the test for host actions (fork, commit, abort,
// server stop/start), over its second serial port, a unix socket on the host.
//
// The attempts scenario (testdata/attempts.sh) also puts the static branchnfs
// binary in the guest and runs exec and race there, in a kernel mount of the
// export /; the guest's branchnfs reaches the server's API through a TCP
// forward of its control socket on the host ($BRANCHNFS_CONTROL, with the
// store's token in $BRANCHNFS_CONTROL_TOKEN). There it also runs `branchnfs
// doctor --json --mounted /mnt/all`: every filesystem check on doctor's
// scratch branch must pass through the kernel client.
//
// The git scenario (testdata/git.sh, TestKernelGit) runs Debian's git as
// uid 1000 in a kernel mount of a fork of main: a repository of 1,000
// generated files, commits, a local clone (hard-linked objects), branch
// checkouts, a fetch back, gc and fsck. The fork is committed and the host
// checks main's repository with its own git on a `branchnfs export`. Its
// git comes in a second initramfs layer (gitLayer), only for that test:
// git, its builtins' names, the templates, and the shared libraries and
// loader the binary's ELF dependencies resolve to (from git, libc6,
// libpcre2-8-0 and zlib1g; nothing of perl or curl), cached beside the
// kernel images and keyed by git's version.
//
// BenchmarkKernelTree (bench_test.go) times a real source tree through the
// guest's client: untar, read back with checksums, ls -lR, rm -rf, with the
// guest's caches dropped before each step. scripts/bench (section kernel)
// runs it against branchnfs and nfs-ganesha mounted side by side in one
// boot; alone it starts a fresh branchnfs:
//
//	go test ./tests/kernel/ -run '^$' -bench KernelTree -benchtime 1x
//
// Steps that fail only because of known NFS protocol gaps are listed, with
// the reason, in knownFailures; the table is checked both ways.
//
// Prerequisites: qemu-system-x86_64, apt-get and dpkg-deb (and git on the
// host for TestKernelGit). Without them the
// tests skip, saying why; with CI=true they fail instead.
//
// For harness development against another NFSv3 server, set
// BRANCHNFS_KERNEL_SERVER to its command ({dir} and {port} are substituted)
// and BRANCHNFS_KERNEL_EXPORT to its export path; branch scenarios and the
// known-failures table then do not apply.
//
//	go test ./tests/kernel/ -v -timeout 20m
package kernel
