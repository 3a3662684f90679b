package kernel

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// guestModules are the kernel modules the guest loads, in dependency order.
// A module missing from the package is assumed to be built in.
var guestModules = []string{"e1000", "sunrpc", "grace", "lockd", "nfs_acl", "netfs", "fscache", "nfs", "nfsv3"}

// guestImage is a bootable kernel plus the cached part of the initramfs.
type guestImage struct {
	kernel  string // path of vmlinuz
	baseGz  string // path of the gzip'ed cpio with busybox and the modules
	version string // e.g. linux-image-6.1.0-57-amd64_6.1.192-3
	// layers are more gzip'ed cpio archives (see gitLayer), each a
	// multiple of 4 bytes long, unpacked over the base.
	layers []string
}

// withLayers returns a copy of img whose initramfs also holds layers.
func (img *guestImage) withLayers(layers ...string) *guestImage {
	c := *img
	c.layers = append(append([]string(nil), img.layers...), layers...)
	return &c
}

// cacheRoot is where built images are kept between runs.
func cacheRoot() (string, error) {
	if d := os.Getenv("BRANCHNFS_KERNEL_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "branchnfs-kernel"), nil
}

// prepareImage returns the cached guest image, building it from Debian's
// packages (apt-get download, dpkg-deb -x: nothing is installed) when the
// cache lacks the kernel that linux-image-amd64 currently points at.
func prepareImage(t testing.TB) (*guestImage, error) {
	t.Helper()
	root, err := cacheRoot()
	if err != nil {
		return nil, err
	}
	kpkg, kver, err := aptKernelPackage()
	if err != nil {
		// No apt metadata (or no apt): fall back to any image built before.
		if img := newestCachedImage(root); img != nil {
			t.Logf("apt lookup failed (%v); using cached image %s", err, img.version)
			return img, nil
		}
		return nil, err
	}
	key := kpkg + "_" + kver
	dir := filepath.Join(root, key)
	if img := cachedImage(dir, key); img != nil {
		return img, nil
	}
	t.Logf("building guest image %s in %s", key, dir)
	work := t.TempDir()
	if err := aptDownload(work, kpkg+"="+kver, "busybox-static"); err != nil {
		return nil, err
	}
	debs, _ := filepath.Glob(filepath.Join(work, "*.deb"))
	tree := filepath.Join(work, "tree")
	for _, deb := range debs {
		if out, err := exec.Command("dpkg-deb", "-x", deb, tree).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("dpkg-deb -x %s: %v: %s", deb, err, out)
		}
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	// Build next to the final directory and rename it into place, so a
	// concurrent or interrupted build never leaves a half-written image.
	build, err := os.MkdirTemp(root, key+".build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(build)
	vmlinuz, _ := filepath.Glob(filepath.Join(tree, "boot", "vmlinuz-*"))
	if len(vmlinuz) != 1 {
		return nil, fmt.Errorf("kernel package %s: want one boot/vmlinuz-*, found %v", kpkg, vmlinuz)
	}
	if err := copyFile(vmlinuz[0], filepath.Join(build, "vmlinuz")); err != nil {
		return nil, err
	}

	var c cpioWriter
	for _, d := range []string{"bin", "sbin", "usr", "usr/bin", "usr/sbin", "lib", "lib/modules", "proc", "sys", "dev", "tmp", "mnt", "etc", "root"} {
		c.dir(d, 0o755)
	}
	busybox, err := os.ReadFile(filepath.Join(tree, "bin", "busybox"))
	if err != nil {
		return nil, fmt.Errorf("busybox-static: %w", err)
	}
	c.file("bin/busybox", 0o755, busybox)
	mods, err := collectModules(tree)
	if err != nil {
		return nil, err
	}
	for _, m := range guestModules {
		if data, ok := mods[m]; ok {
			c.file("lib/modules/"+m+".ko", 0o644, data)
		} else {
			t.Logf("module %s not in %s; assuming it is built in", m, kpkg)
		}
	}
	if err := writeGzipCpio(filepath.Join(build, "base.cpio.gz"), &c); err != nil {
		return nil, err
	}
	if err := os.Rename(build, dir); err != nil && cachedImage(dir, key) == nil {
		return nil, fmt.Errorf("install image: %w", err)
	}
	img := cachedImage(dir, key)
	if img == nil {
		return nil, fmt.Errorf("image in %s incomplete after build", dir)
	}
	return img, nil
}

// writeGzipCpio writes the archive gzip'ed to path, padded to a multiple of
// 4 bytes: the kernel only looks for a following archive at a 4-byte
// boundary.
func writeGzipCpio(path string, c *cpioWriter) error {
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	zw.Write(c.finish())
	if err := zw.Close(); err != nil {
		return err
	}
	for gz.Len()%4 != 0 {
		gz.WriteByte(0)
	}
	return os.WriteFile(path, gz.Bytes(), 0o644)
}

func cachedImage(dir, key string) *guestImage {
	img := &guestImage{kernel: filepath.Join(dir, "vmlinuz"), baseGz: filepath.Join(dir, "base.cpio.gz"), version: key}
	for _, p := range []string{img.kernel, img.baseGz} {
		if _, err := os.Stat(p); err != nil {
			return nil
		}
	}
	return img
}

func newestCachedImage(root string) *guestImage {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	for _, n := range names {
		if img := cachedImage(filepath.Join(root, n), n); img != nil {
			return img
		}
	}
	return nil
}

var dependsRE = regexp.MustCompile(`^Depends: .*?(linux-image-[0-9][^ ,]*-amd64) \(= ([^)]+)\)`)

// aptKernelPackage resolves the metapackage linux-image-amd64 to the kernel
// package it depends on, from the local apt lists (no network).
func aptKernelPackage() (pkg, version string, err error) {
	if _, err := exec.LookPath("apt-cache"); err != nil {
		return "", "", errors.New("apt-cache not found: this test needs Debian's apt to fetch the guest kernel")
	}
	out, err := exec.Command("apt-cache", "show", "--no-all-versions", "linux-image-amd64").Output()
	if err != nil || len(out) == 0 {
		if os.Geteuid() == 0 {
			if uout, uerr := exec.Command("apt-get", "update", "-q").CombinedOutput(); uerr != nil {
				return "", "", fmt.Errorf("apt-get update: %v: %s", uerr, tail(string(uout), 5))
			}
			out, err = exec.Command("apt-cache", "show", "--no-all-versions", "linux-image-amd64").Output()
		}
		if err != nil || len(out) == 0 {
			return "", "", fmt.Errorf("apt-cache show linux-image-amd64: no package (run apt-get update): %v", err)
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := dependsRE.FindStringSubmatch(sc.Text()); m != nil {
			return m[1], m[2], nil
		}
	}
	return "", "", fmt.Errorf("apt-cache show linux-image-amd64: no linux-image-*-amd64 dependency in %q", tail(string(out), 20))
}

// aptDownload fetches .deb files into dir with apt-get download, which needs
// no root. As root, a failure is retried once after apt-get update.
func aptDownload(dir string, pkgs ...string) error {
	// apt's _apt sandbox user must be able to write dir.
	os.Chmod(dir, 0o777)
	try := func() error {
		cmd := exec.Command("apt-get", append([]string{"download", "-q"}, pkgs...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("apt-get download %s: %v: %s", strings.Join(pkgs, " "), err, tail(string(out), 5))
		}
		return nil
	}
	err := try()
	if err != nil && os.Geteuid() == 0 {
		exec.Command("apt-get", "update", "-q").Run()
		err = try()
	}
	return err
}

// collectModules finds the guest modules in an unpacked kernel package,
// decompressing .ko.xz / .ko.zst / .ko.gz with the host's tools.
func collectModules(tree string) (map[string][]byte, error) {
	want := map[string]bool{}
	for _, m := range guestModules {
		want[m] = true
	}
	found := map[string][]byte{}
	err := filepath.WalkDir(filepath.Join(tree, "lib", "modules"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		base := d.Name()
		i := strings.Index(base, ".ko")
		if i < 0 {
			return nil
		}
		name, ext := base[:i], base[i+3:]
		if !want[name] {
			return nil
		}
		var data []byte
		switch ext {
		case "":
			data, err = os.ReadFile(p)
		case ".xz":
			data, err = exec.Command("xz", "-dc", p).Output()
		case ".zst":
			data, err = exec.Command("zstd", "-dc", p).Output()
		case ".gz":
			data, err = exec.Command("gzip", "-dc", p).Output()
		default:
			return nil
		}
		if err != nil {
			return fmt.Errorf("decompress %s: %w", p, err)
		}
		found[name] = data
		return nil
	})
	return found, err
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cpioWriter writes a "newc" cpio archive, the format the kernel unpacks
// into the initramfs.
type cpioWriter struct {
	buf bytes.Buffer
	ino int
}

func (c *cpioWriter) header(name string, mode uint32, size int) {
	c.ino++
	fmt.Fprintf(&c.buf, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	c.buf.WriteString(name)
	c.buf.WriteByte(0)
	c.pad()
}

func (c *cpioWriter) pad() {
	for c.buf.Len()%4 != 0 {
		c.buf.WriteByte(0)
	}
}

func (c *cpioWriter) dir(name string, perm uint32) { c.header(name, 0o040000|perm, 0) }

func (c *cpioWriter) file(name string, perm uint32, data []byte) {
	c.header(name, 0o100000|perm, len(data))
	c.buf.Write(data)
	c.pad()
}

func (c *cpioWriter) symlink(name, target string) {
	c.header(name, 0o120777, len(target))
	c.buf.WriteString(target)
	c.pad()
}

func (c *cpioWriter) finish() []byte {
	c.header("TRAILER!!!", 0, 0)
	return c.buf.Bytes()
}
