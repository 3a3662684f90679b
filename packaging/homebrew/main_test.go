package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/branchnfs.rb")

func TestFormulaGolden(t *testing.T) {
	sums, err := os.ReadFile(filepath.Join("testdata", "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := render(&b, "v1.2.3", bytes.NewReader(sums)); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "branchnfs.rb")
	if *rewrite {
		os.WriteFile(golden, b.Bytes(), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Fatalf("formula differs from %s (-rewrite updates it):\n%s", golden, b.String())
	}
	for _, s := range []string{"service do", `run [opt_bin/"branchnfs", "serve"]`, "keep_alive successful_exit: false", "process_type :interactive"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("formula lacks %q", s)
		}
	}
}

func TestFormulaMissingArchive(t *testing.T) {
	sums := "0000000000000000000000000000000000000000000000000000000000000000  branchnfs_1.2.3_darwin_arm64.tar.gz\n"
	var b bytes.Buffer
	if err := render(&b, "1.2.3", strings.NewReader(sums)); err == nil || !strings.Contains(err.Error(), "darwin_amd64") {
		t.Fatalf("render with three archives missing: %v", err)
	}
}
