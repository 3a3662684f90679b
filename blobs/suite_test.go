package blobs_test

import (
	"fmt"
	"testing"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/blobs/blobstest"
	"github.com/branchnfs/branchnfs/internal/testbin"
)

func TestSuiteMem(t *testing.T) {
	blobstest.RunSuite(t, func(t *testing.T) blobs.Store { return blobs.NewMem() })
}

func TestSuiteCacheMem(t *testing.T) {
	blobstest.RunSuite(t, func(t *testing.T) blobs.Store {
		c, err := blobs.OpenCache(blobs.NewMem(), blobs.CacheOptions{Dir: t.TempDir(), MaxBytes: 4 << 20})
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

// TestSuiteS3 runs the suite on S3 (versitygw), bare and behind a cache,
// each case under its own prefix of one bucket.
func TestSuiteS3(t *testing.T) {
	srv := testbin.StartS3(t)
	n := 0
	open := func(t *testing.T) *blobs.S3 {
		n++
		s, err := blobs.OpenS3(bg, s3Options(srv, fmt.Sprintf("suite%d", n)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Run("S3", func(t *testing.T) {
		blobstest.RunSuite(t, func(t *testing.T) blobs.Store { return open(t) })
	})
	t.Run("Cache", func(t *testing.T) {
		blobstest.RunSuite(t, func(t *testing.T) blobs.Store {
			c, err := blobs.OpenCache(open(t), blobs.CacheOptions{Dir: t.TempDir(), MaxBytes: 4 << 20})
			if err != nil {
				t.Fatal(err)
			}
			return c
		})
	})
}
