package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/branchnfs/branchnfs/blobs"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/etcdkv"
	"github.com/spf13/cobra"
)

// STORE/backend.json records where a store keeps its metadata and its
// block content when that is not the local Badger database: `init` or the
// `serve` that creates the store writes it from --meta and --blocks, and
// every later command reads it, so only those two commands take the
// flags. Its fields:
//
//	meta               etcd://host:port,.../prefix (etcds:// for TLS): metadata on etcd (absent: STORE/db)
//	blocks             s3://bucket/prefix?endpoint=...: content in S3 (absent: in the metadata store)
//	blocks_cache       the disk cache of blocks (default STORE/blocks-cache)
//	blocks_cache_size  its bound in bytes (default 1 GiB)
//	blocks_retry       how long an S3 request retries before the client is told to retry, e.g. "10s"
//
// meta and blocks are fixed when the store is created; the cache and retry
// settings may change with the flags of a later init or serve.
const (
	backendFileName     = "backend.json"
	blocksCacheDirName  = "blocks-cache"
	defaultBlocksCache  = 1 << 30
	defaultBlocksRetry  = 10 * time.Second
	backendFileTempName = "backend.json.tmp"
)

// backendConfig is STORE/backend.json.
type backendConfig struct {
	Meta            string `json:"meta,omitempty"`
	Blocks          string `json:"blocks,omitempty"`
	BlocksCache     string `json:"blocks_cache,omitempty"`
	BlocksCacheSize int64  `json:"blocks_cache_size,omitempty"`
	BlocksRetry     string `json:"blocks_retry,omitempty"`
}

// backendFlags are init's and serve's flags for the backend.
type backendFlags struct {
	Meta, Blocks, BlocksCache, BlocksCacheSize, BlocksRetry string
}

func (f *backendFlags) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.Meta, "meta", "",
		"keep the metadata in an etcd v3 cluster, etcd://host:port,host:port/prefix (etcds:// for TLS, certificates from ETCDCTL_CACERT, ETCDCTL_CERT and ETCDCTL_KEY), instead of STORE/db (recorded in STORE/backend.json at creation)")
	cmd.Flags().StringVar(&f.Blocks, "blocks", "",
		"keep block content in S3, s3://bucket/prefix?endpoint=host:port&region=R&insecure=1, credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (recorded in STORE/backend.json at creation)")
	cmd.Flags().StringVar(&f.BlocksCache, "blocks-cache", "", "directory of the local cache of S3 blocks (default STORE/"+blocksCacheDirName+")")
	cmd.Flags().StringVar(&f.BlocksCacheSize, "blocks-cache-size", "", "bound of the local cache of S3 blocks, e.g. 4G (default 1G)")
	cmd.Flags().StringVar(&f.BlocksRetry, "blocks-retry", "", "how long an S3 request retries before the client is told to retry the call later, e.g. 10s (default 10s)")
}

// config returns the configuration the flags ask for, nil if none was
// given.
func (f *backendFlags) config() (*backendConfig, error) {
	if *f == (backendFlags{}) {
		return nil, nil
	}
	c := &backendConfig{Meta: f.Meta, Blocks: f.Blocks, BlocksCache: f.BlocksCache, BlocksRetry: f.BlocksRetry}
	if c.Meta != "" {
		if _, _, err := etcdkv.ParseURL(c.Meta); err != nil {
			return nil, usagef("--meta: %v", err)
		}
	}
	if c.Blocks != "" {
		if _, err := blobs.ParseS3URL(c.Blocks); err != nil {
			return nil, usagef("--blocks: %v", err)
		}
	}
	if f.BlocksCacheSize != "" {
		n, err := parseSize(f.BlocksCacheSize)
		if err != nil || n == 0 {
			return nil, usagef("--blocks-cache-size: %q: want a size above 0 such as 4G", f.BlocksCacheSize)
		}
		c.BlocksCacheSize = n
	}
	if c.BlocksRetry != "" {
		if d, err := time.ParseDuration(c.BlocksRetry); err != nil || d <= 0 {
			return nil, usagef("--blocks-retry: %q: want a duration such as 30s", c.BlocksRetry)
		}
	}
	if c.BlocksCache != "" {
		abs, err := filepath.Abs(c.BlocksCache)
		if err != nil {
			return nil, usagef("--blocks-cache: %v", err)
		}
		c.BlocksCache = abs
	}
	return c, nil
}

// describe says where the metadata and the blocks are, "" for the
// default (both in STORE/db).
func (c *backendConfig) describe() string {
	if c == nil || (c.Meta == "" && c.Blocks == "") {
		return ""
	}
	meta, blocks := c.Meta, c.Blocks
	if meta == "" {
		meta = "the local Badger database"
	}
	if blocks == "" {
		blocks = "the metadata store"
	}
	return "metadata in " + meta + ", blocks in " + blocks
}

// readBackend reads STORE/backend.json; nil, nil when there is none.
func readBackend(dir string) (*backendConfig, error) {
	b, err := os.ReadFile(filepath.Join(dir, backendFileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the store's backend: %w", err)
	}
	var c backendConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %v: fix or restore the file (it names the store's etcd and S3 locations)", filepath.Join(dir, backendFileName), err)
	}
	return &c, nil
}

// writeBackend writes STORE/backend.json atomically.
func writeBackend(dir string, c *backendConfig) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, backendFileTempName)
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("record the store's backend: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, backendFileName)); err != nil {
		return fmt.Errorf("record the store's backend: %w", err)
	}
	return nil
}

// resolveBackend returns the backend of the store in dir: the recorded
// one, with the local settings of flags applied, or for a new store the
// flags' (recorded when record is set). exists says whether the store
// exists.
func resolveBackend(dir string, exists bool, flags *backendConfig) (*backendConfig, bool, error) {
	rec, err := readBackend(dir)
	if err != nil {
		return nil, false, err
	}
	if !exists {
		if flags == nil {
			return &backendConfig{}, false, nil
		}
		return flags, flags.Meta != "" || flags.Blocks != "", nil
	}
	if rec == nil {
		rec = &backendConfig{}
	}
	if flags != nil {
		if flags.Meta != rec.Meta || flags.Blocks != rec.Blocks {
			return nil, false, fmt.Errorf("store %s was created with --meta %q --blocks %q (see %s); a store's metadata and blocks stay where they were created: give the same values, or none",
				dir, rec.Meta, rec.Blocks, filepath.Join(dir, backendFileName))
		}
		changed := false
		if flags.BlocksCache != "" && flags.BlocksCache != rec.BlocksCache {
			rec.BlocksCache, changed = flags.BlocksCache, true
		}
		if flags.BlocksCacheSize != 0 && flags.BlocksCacheSize != rec.BlocksCacheSize {
			rec.BlocksCacheSize, changed = flags.BlocksCacheSize, true
		}
		if flags.BlocksRetry != "" && flags.BlocksRetry != rec.BlocksRetry {
			rec.BlocksRetry, changed = flags.BlocksRetry, true
		}
		return rec, changed && (rec.Meta != "" || rec.Blocks != ""), nil
	}
	return rec, false, nil
}

// openMeta opens the metadata store of the store in dir.
func openMeta(dir string, c *backendConfig, oo openOptions, logger *slog.Logger) (kv.Store, error) {
	if c.Meta != "" {
		st, err := etcdkv.OpenURL(c.Meta, etcdkv.Options{Logger: logger})
		if err != nil {
			return nil, fmt.Errorf("open the metadata of store %s: %w", dir, err)
		}
		return st, nil
	}
	return kv.OpenBadger(filepath.Join(dir, dbDirName), kv.BadgerOptions{SyncWrites: oo.syncWrites, Reserve: oo.reserve, Logger: logger})
}

// openBlocks opens the block store of the store in dir, nil when content
// stays in the metadata store.
func openBlocks(ctx context.Context, dir string, c *backendConfig, logger *slog.Logger) (blobs.Store, error) {
	if c.Blocks == "" {
		return nil, nil
	}
	so, err := blobs.ParseS3URL(c.Blocks)
	if err != nil {
		return nil, err
	}
	so.Logger = logger
	so.RetryFor = defaultBlocksRetry
	if c.BlocksRetry != "" {
		if so.RetryFor, err = time.ParseDuration(c.BlocksRetry); err != nil {
			return nil, fmt.Errorf("%s: blocks_retry %q: %v", filepath.Join(dir, backendFileName), c.BlocksRetry, err)
		}
	}
	s3, err := blobs.OpenS3(ctx, so)
	if err != nil {
		return nil, fmt.Errorf("open the blocks of store %s: %w", dir, err)
	}
	cacheDir := c.BlocksCache
	if cacheDir == "" {
		cacheDir = filepath.Join(dir, blocksCacheDirName)
	}
	size := c.BlocksCacheSize
	if size == 0 {
		size = defaultBlocksCache
	}
	cache, err := blobs.OpenCache(s3, blobs.CacheOptions{Dir: cacheDir, MaxBytes: size, Logger: logger})
	if err != nil {
		s3.Close()
		return nil, fmt.Errorf("open the block cache of store %s: %w", dir, err)
	}
	return cache, nil
}
