package control

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/nfsserver/control/controltest"
)

// serveLocal serves opts in-process until the test ends and returns its
// client.
func serveLocal(t *testing.T, opts ServerOptions) *Client {
	t.Helper()
	opts.Backend, opts.Token = controltest.New(), "t"
	srv, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv.LocalClient()
}

func TestImportUpdateEndpoint(t *testing.T) {
	ctx := context.Background()
	var out map[string]any
	if err := serveLocal(t, ServerOptions{}).ImportUpdate(ctx, ImportUpdateRequest{}, &out); err == nil {
		t.Fatal("a server without an updater ran an update")
	}
	var got []ImportUpdateRequest
	c := serveLocal(t, ServerOptions{ImportUpdate: func(_ context.Context, req ImportUpdateRequest) (any, error) {
		got = append(got, req)
		if !req.Force {
			return nil, &branches.HasChildrenError{Branch: "main", Children: []string{"agent"}}
		}
		return map[string]any{"source": req.From, "added": 1}, nil
	}})
	if err := c.ImportUpdate(ctx, ImportUpdateRequest{From: "relative/dir", Force: true}, &out); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("a relative from: %v, want bad_request", err)
	}
	var hc *branches.HasChildrenError
	if err := c.ImportUpdate(ctx, ImportUpdateRequest{}, &out); !errors.As(err, &hc) || !slices.Equal(hc.Children, []string{"agent"}) {
		t.Fatalf("an update refused for live children: %v", err)
	}
	if err := c.ImportUpdate(ctx, ImportUpdateRequest{From: "/src", Force: true}, &out); err != nil || out["source"] != "/src" || out["added"] != 1.0 {
		t.Fatalf("update: %v %v", err, out)
	}
	if len(got) != 2 || got[1] != (ImportUpdateRequest{From: "/src", Force: true}) {
		t.Fatalf("the updater got %+v", got)
	}
}
