package control

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/kv"
	"github.com/branchnfs/branchnfs/kv/kvtest"
)

// countingStore counts the transactions and snapshots opened on a store:
// every read of stored data goes through one.
type countingStore struct {
	kv.Store
	n atomic.Int64
}

func (c *countingStore) View(ctx context.Context, fn func(kv.Txn) error) error {
	c.n.Add(1)
	return c.Store.View(ctx, fn)
}

func (c *countingStore) Update(ctx context.Context, fn func(kv.Txn) error) error {
	c.n.Add(1)
	return c.Store.Update(ctx, fn)
}

func (c *countingStore) NewSnapshot() kv.Snapshot {
	c.n.Add(1)
	return c.Store.NewSnapshot()
}

// TestStatusReadsNoStoredData checks that GET /v1/status answers from
// memory: its cost must not grow with the store.
func TestStatusReadsNoStoredData(t *testing.T) {
	ctx := context.Background()
	cs := &countingStore{Store: kvtest.NewStore(t)}
	m, err := branches.Open(ctx, branches.Options{Store: cs, ReclaimDelay: -1, NoLifecycleSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("b%d", i)
		if _, err := m.Fork(ctx, "main", name); err != nil {
			t.Fatal(err)
		}
		fs, _, err := m.View(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := fs.Billy().Create("data")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(make([]byte, 100<<10)); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if _, err := m.Checkpoint(ctx, name, "cp"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Abort(ctx, "b2"); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ServerOptions{Backend: m, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	before := cs.n.Load()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/v1/status", nil)
	req.Header.Set("Authorization", "Bearer t")
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status: %d %s", rec.Code, rec.Body)
	}
	if n := cs.n.Load() - before; n != 0 {
		t.Fatalf("GET /v1/status opened %d store transactions, want 0", n)
	}
	var got Status
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.LiveBranches != 3 { // main, b0, b1
		t.Fatalf("live_branches = %d, want 3", got.LiveBranches)
	}
}
