package branches_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/go-git/go-billy/v5/util"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
)

// Example shows the in-process Go API: another Go program can fork a
// branch, work in it through the go-billy filesystem of its view, and
// commit it into its parent, with no NFS server and no mount.
func Example() {
	dir, err := os.MkdirTemp("", "branchnfs-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	st, err := kv.OpenBadger(dir, kv.BadgerOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	m, err := branches.Open(ctx, branches.Options{Store: st})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	if _, err := m.Fork(ctx, branches.MainBranch, "attempt-1"); err != nil {
		log.Fatal(err)
	}
	view, _, err := m.View("attempt-1")
	if err != nil {
		log.Fatal(err)
	}
	fs := view.Billy() // a go-billy v5 filesystem over the branch
	if err := fs.MkdirAll("src", 0o755); err != nil {
		log.Fatal(err)
	}
	if err := util.WriteFile(fs, "src/fix.go", []byte("package src\n"), 0o644); err != nil {
		log.Fatal(err)
	}

	// Not yet in main: the branch is isolated until it commits.
	mainView, _, err := m.View(branches.MainBranch)
	if err != nil {
		log.Fatal(err)
	}
	_, err = mainView.Billy().Stat("src/fix.go")
	fmt.Println("in main before commit:", err == nil)

	if _, err := m.Commit(ctx, "attempt-1"); err != nil {
		log.Fatal(err)
	}
	b, err := util.ReadFile(mainView.Billy(), "src/fix.go")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("in main after commit: %q\n", b)
	// Output:
	// in main before commit: false
	// in main after commit: "package src\n"
}
