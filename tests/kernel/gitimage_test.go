package kernel

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// gitPackages are the Debian packages the guest's git comes from: git
// itself and the packages of the shared libraries /usr/bin/git links
// (libc6 also brings the dynamic loader). Building the layer checks that
// they hold every library git needs, and names what is missing.
var gitPackages = []string{"git", "libc6", "libpcre2-8-0", "zlib1g"}

// libDirs are where the unpacked packages keep shared libraries; the
// layer puts every library of git's closure in the guest's first one,
// which the loader searches without an ld.so.cache.
var libDirs = []string{"lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib", "usr/lib", "lib64"}

// gitLayer returns the cached initramfs layer with Debian's git: the git
// binary, its builtins' names in /usr/lib/git-core, the repository
// templates, and the shared libraries and loader it needs (nothing else:
// no perl, no curl, no remote helpers). It is cached beside the kernel
// images, keyed by the git package's version.
func gitLayer(t testing.TB) (string, error) {
	t.Helper()
	root, err := cacheRoot()
	if err != nil {
		return "", err
	}
	ver, err := aptVersion("git")
	if err != nil {
		if p := newestCachedLayer(root, "git_"); p != "" {
			t.Logf("apt lookup failed (%v); using cached git layer %s", err, p)
			return p, nil
		}
		return "", err
	}
	key := "git_" + strings.ReplaceAll(ver, ":", "_")
	dir := filepath.Join(root, key)
	layer := filepath.Join(dir, "git.cpio.gz")
	if _, err := os.Stat(layer); err == nil {
		return layer, nil
	}
	t.Logf("building git layer %s in %s", key, dir)
	work := t.TempDir()
	if err := aptDownload(work, gitPackages...); err != nil {
		return "", err
	}
	debs, _ := filepath.Glob(filepath.Join(work, "*.deb"))
	tree := filepath.Join(work, "tree")
	for _, deb := range debs {
		if out, err := exec.Command("dpkg-deb", "-x", deb, tree).CombinedOutput(); err != nil {
			return "", fmt.Errorf("dpkg-deb -x %s: %v: %s", deb, err, out)
		}
	}
	var c cpioWriter
	if err := buildGitLayer(&c, tree); err != nil {
		return "", err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	build, err := os.MkdirTemp(root, key+".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(build)
	if err := writeGzipCpio(filepath.Join(build, "git.cpio.gz"), &c); err != nil {
		return "", err
	}
	if err := os.Rename(build, dir); err != nil {
		if _, serr := os.Stat(layer); serr != nil {
			return "", fmt.Errorf("install git layer: %w", err)
		}
	}
	return layer, nil
}

// buildGitLayer writes the guest's git from the unpacked packages in tree.
func buildGitLayer(c *cpioWriter, tree string) error {
	libs, interp, err := sharedClosure(tree, "usr/bin/git")
	if err != nil {
		return err
	}
	for _, d := range []string{"usr", "usr/bin", "usr/lib", "usr/lib/git-core", "usr/share", "usr/share/git-core", "lib", libDirs[0], path.Dir(interp)} {
		c.dir(d, 0o755)
	}
	git, err := os.ReadFile(filepath.Join(tree, "usr/bin/git"))
	if err != nil {
		return fmt.Errorf("git package: %w", err)
	}
	c.file("usr/bin/git", 0o755, git)
	c.symlink("usr/lib/git-core/git", "/usr/bin/git")
	// The dashed names of builtins (git-upload-pack, which a local clone
	// runs, among them) are symlinks to git in the package.
	builtins := 0
	for _, d := range []string{"usr/bin", "usr/lib/git-core"} {
		ents, err := os.ReadDir(filepath.Join(tree, d))
		if err != nil {
			return fmt.Errorf("git package: %w", err)
		}
		for _, e := range ents {
			if target, err := os.Readlink(filepath.Join(tree, d, e.Name())); err == nil && target == "git" {
				c.symlink(d+"/"+e.Name(), "git")
				builtins++
			}
		}
	}
	if builtins < 50 {
		return fmt.Errorf("git package: only %d builtins linked to git in usr/bin and usr/lib/git-core; the package's layout changed", builtins)
	}
	templates := "usr/share/git-core/templates"
	err = filepath.WalkDir(filepath.Join(tree, templates), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(tree, p)
		switch {
		case d.IsDir():
			c.dir(rel, 0o755)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			c.file(rel, uint32(info.Mode().Perm()), data)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("git templates: %w", err)
	}
	names := make([]string, 0, len(libs))
	for soname := range libs {
		names = append(names, soname)
	}
	sort.Strings(names)
	for _, soname := range names {
		data, err := os.ReadFile(libs[soname])
		if err != nil {
			return err
		}
		c.file(libDirs[0]+"/"+soname, 0o755, data)
	}
	// The loader git names (PT_INTERP), as Debian has it: a link to the
	// copy in the library directory.
	if _, ok := libs[path.Base(interp)]; !ok {
		return fmt.Errorf("git's loader %s is not in its libraries' closure %v", interp, names)
	}
	c.symlink(strings.TrimPrefix(interp, "/"), "/"+libDirs[0]+"/"+path.Base(interp))
	return nil
}

// sharedClosure resolves the shared libraries the ELF binary bin (relative
// to tree) needs, directly or through other libraries, to files in tree:
// soname -> path. It also returns the binary's loader (PT_INTERP).
func sharedClosure(tree, bin string) (libs map[string]string, interp string, err error) {
	f, err := elf.Open(filepath.Join(tree, bin))
	if err != nil {
		return nil, "", err
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				f.Close()
				return nil, "", err
			}
			interp = string(bytes.TrimRight(b, "\x00"))
		}
	}
	f.Close()
	if interp == "" {
		return nil, "", fmt.Errorf("%s has no loader (PT_INTERP)", bin)
	}
	libs = map[string]string{}
	queue := []string{filepath.Join(tree, bin)}
	for len(queue) > 0 {
		file := queue[0]
		queue = queue[1:]
		f, err := elf.Open(file)
		if err != nil {
			return nil, "", err
		}
		needed, err := f.ImportedLibraries()
		f.Close()
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", file, err)
		}
		for _, soname := range needed {
			if _, ok := libs[soname]; ok {
				continue
			}
			p, ok := findLib(tree, soname)
			if !ok {
				return nil, "", fmt.Errorf("%s needs %s, which none of the packages %v holds: add the package that ships it to gitPackages", strings.TrimPrefix(file, tree+"/"), soname, gitPackages)
			}
			libs[soname] = p
			queue = append(queue, p)
		}
	}
	return libs, interp, nil
}

// findLib finds soname in tree's library directories, following the
// package's symlinks (absolute ones within tree) to the file.
func findLib(tree, soname string) (string, bool) {
	for _, d := range libDirs {
		p := path.Join("/", d, soname)
		for hops := 0; hops < 10; hops++ {
			info, err := os.Lstat(filepath.Join(tree, p))
			if err != nil {
				break
			}
			if info.Mode().IsRegular() {
				return filepath.Join(tree, p), true
			}
			target, err := os.Readlink(filepath.Join(tree, p))
			if err != nil {
				break
			}
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(p), target)
			}
			p = target
		}
	}
	return "", false
}

// aptVersion returns the candidate version of a Debian package from the
// local apt lists.
func aptVersion(pkg string) (string, error) {
	out, err := exec.Command("apt-cache", "show", "--no-all-versions", pkg).Output()
	if err != nil {
		return "", fmt.Errorf("apt-cache show %s: %v (run apt-get update)", pkg, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Version: "); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("apt-cache show %s: no Version (run apt-get update)", pkg)
}

// newestCachedLayer returns the newest cached layer in a directory whose
// name starts with prefix, or "".
func newestCachedLayer(root, prefix string) string {
	matches, _ := filepath.Glob(filepath.Join(root, prefix+"*", "*.cpio.gz"))
	sort.Sort(sort.Reverse(sort.StringSlice(matches)))
	for _, m := range matches {
		if !strings.Contains(filepath.Base(filepath.Dir(m)), ".build-") {
			return m
		}
	}
	return ""
}
