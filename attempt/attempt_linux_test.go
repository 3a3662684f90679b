package attempt

import (
	"os"
	"path/filepath"
	"testing"
)

// Without files, the command's standard files are /dev/null, never closed
// descriptors that a file the helper opens could take over.
func TestDefaultFilesAreDevNull(t *testing.T) {
	dir := t.TempDir()
	a := start(t, `x0=$(readlink /proc/$$/fd/0); x1=$(readlink /proc/$$/fd/1); x2=$(readlink /proc/$$/fd/2); echo "$x0 $x1 $x2" > out`, Options{Dir: dir})
	wait(t, a)
	b, err := os.ReadFile(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != "/dev/null /dev/null /dev/null\n" {
		t.Fatalf("fds 0-2 of the command: %q", got)
	}
}
