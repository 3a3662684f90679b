package main

import (
	"context"
	"strings"
	"testing"
)

// TestBackendRecorded: the backend a store is created with is recorded in
// STORE/backend.json, later opens without flags use it, the local cache
// settings may change, and a different --meta or --blocks is refused,
// also for a Badger store created without them.
func TestBackendRecorded(t *testing.T) {
	dir := t.TempDir()
	flags := &backendConfig{Meta: "etcd://h1:2379/p", Blocks: "s3://b/p?endpoint=h:9000"}
	be, record, err := resolveBackend(dir, false, flags)
	if err != nil || !record || *be != *flags {
		t.Fatalf("new store: %+v, record %v, %v", be, record, err)
	}
	if err := writeBackend(dir, be); err != nil {
		t.Fatal(err)
	}
	if !storeExists(dir) {
		t.Fatal("a store with a backend.json and no db/ does not exist")
	}
	be, record, err = resolveBackend(dir, true, nil)
	if err != nil || record || *be != *flags {
		t.Fatalf("reopened without flags: %+v, record %v, %v", be, record, err)
	}
	be, record, err = resolveBackend(dir, true, &backendConfig{Meta: flags.Meta, Blocks: flags.Blocks, BlocksCacheSize: 4 << 30})
	if err != nil || !record || be.BlocksCacheSize != 4<<30 || be.Meta != flags.Meta {
		t.Fatalf("reopened with a cache size: %+v, record %v, %v", be, record, err)
	}
	if _, _, err := resolveBackend(dir, true, &backendConfig{Meta: flags.Meta}); err == nil || !strings.Contains(err.Error(), "backend.json") {
		t.Fatalf("reopened without --blocks: %v, want a refusal naming backend.json", err)
	}

	// A Badger store refuses to move its content to S3.
	store := t.TempDir()
	s, err := openStore(context.Background(), store, openOptions{create: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = openStore(context.Background(), store, openOptions{backend: &backendConfig{Blocks: "s3://b/p?endpoint=h:9000"}})
	if err == nil || !strings.Contains(err.Error(), "stay where they were created") {
		t.Fatalf("a Badger store opened with --blocks: %v, want a refusal", err)
	}
}

// TestMetaFlag: --meta takes etcd:// and etcds:// URLs, and refuses
// others with a usage error naming the flag and both forms.
func TestMetaFlag(t *testing.T) {
	for _, ok := range []string{"etcd://h1:2379,h2/p", "etcds://h1:2379,h2/p"} {
		if c, err := (&backendFlags{Meta: ok}).config(); err != nil || c.Meta != ok {
			t.Errorf("--meta %s: %+v, %v", ok, c, err)
		}
	}
	for _, bad := range []string{"https://h1:2379/p", "etcds://h1/p?cacert=ca.pem"} {
		_, err := (&backendFlags{Meta: bad}).config()
		if err == nil || !strings.Contains(err.Error(), "--meta") || !strings.Contains(err.Error(), "etcds://") {
			t.Errorf("--meta %s: %v, want a usage error naming --meta and etcds://", bad, err)
		}
	}
}
