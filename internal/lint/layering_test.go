package lint

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/branchnfs/branchnfs"

// layers ranks the module's packages: a package may import packages of a
// lower or equal rank, never a higher one. Every package of the module must
// be placed here (or under a prefix in topPrefixes), so a new package is a
// decision, not an accident.
var layers = map[string]int{
	"kv":                            0,
	"kv/kvtest":                     0,
	"kv/etcdkv":                     0,
	"kv/etcdkv/etcdtest":            0,
	"internal/par":                  0,
	"internal/lograte":              0,
	"blobs":                         0,
	"blobs/blobstest":               0,
	"cowfs":                         1,
	"cowfs/importdir":               1,
	"branches":                      2,
	"branches/branchestest":         2,
	"branches/results":              2,
	"nfsserver":                     3,
	"nfsserver/control":             3,
	"nfsserver/control/controltest": 3,
	"nfsserver/control/mcpserver":   3,
	"nfsserver/s3gw":                3,
	"attempt":                       3,
	"attempt/runner":                3,
	"cmd/branchnfs":                 4,
}

// topPrefixes hold packages that sit above everything (benchmarks, test
// harnesses, tools, release packaging): they may import anything, and nothing imports them;
// a package under one that layers ranks (a library of internal/) is
// ranked instead.
var topPrefixes = []string{"bench/", "tests/", "internal/", "packaging/"}

// onlyIn names third-party packages that only the listed packages of ours
// may import: each storage engine stays behind its kv.Store.
var onlyIn = map[string][]string{
	"github.com/dgraph-io/badger": {"kv"},
	"go.etcd.io/etcd":             {"kv/etcdkv", "kv/etcdkv/etcdtest"},
	"github.com/minio/minio-go":   {"blobs"},
	// The S3 front end's server library stays behind package s3gw.
	"github.com/versity/versitygw": {"nfsserver/s3gw"},
}

type pkg struct {
	ImportPath string
	Imports    []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(&out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no packages")
	}
	return pkgs
}

func rel(path string) (string, bool) {
	if path == module {
		return "", true
	}
	r, ok := strings.CutPrefix(path, module+"/")
	return r, ok
}

func isTop(r string) bool {
	if _, ranked := layers[r]; ranked {
		return false
	}
	for _, p := range topPrefixes {
		if strings.HasPrefix(r, p) {
			return true
		}
	}
	return false
}

// TestLayering enforces the dependency direction
// cmd/branchnfs → nfsserver (+control) → branches → cowfs → kv, and that
// Badger is imported by kv alone, etcd by kv/etcdkv alone.
func TestLayering(t *testing.T) {
	for _, p := range listPackages(t) {
		from, _ := rel(p.ImportPath)
		fromTop := isTop(from)
		fromRank, placed := layers[from]
		if !fromTop && !placed {
			t.Errorf("package %s is not placed in the layering table of internal/lint/layering_test.go: add it with its rank", from)
			continue
		}
		for _, imp := range p.Imports {
			for third, owners := range onlyIn {
				if (imp == third || strings.HasPrefix(imp, third+"/")) && !slices.Contains(owners, from) {
					t.Errorf("%s imports %s: only %s may", from, imp, strings.Join(owners, " and "))
				}
			}
			to, ours := rel(imp)
			if !ours {
				continue
			}
			if isTop(to) {
				if !fromTop {
					t.Errorf("%s imports %s, a benchmark, test or tool package", from, to)
				}
				continue
			}
			if fromTop {
				continue
			}
			if toRank, ok := layers[to]; ok && toRank > fromRank {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must flow cmd → nfsserver → branches → cowfs → kv", from, fromRank, to, toRank)
			}
		}
	}
}
