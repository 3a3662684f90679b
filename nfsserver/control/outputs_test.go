package control

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/branchnfs/branchnfs/branches"
	"github.com/branchnfs/branchnfs/branches/results"
)

// TestOutputsThroughClient: patch, export and change set of a real
// manager through the API equal what the manager writes itself.
func TestOutputsThroughClient(t *testing.T) {
	m, dir := diskManager(t, 100_000)
	c := serveBackend(t, m, dir)
	ctx := context.Background()
	var direct, api bytes.Buffer
	if _, err := m.Patch(ctx, "b", "", &direct); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Patch(ctx, "b", "", &api); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(direct.Bytes(), api.Bytes()) || !strings.Contains(api.String(), "GIT binary patch") {
		t.Fatalf("patch through the API differs (%d vs %d bytes)", api.Len(), direct.Len())
	}
	api.Reset()
	if _, err := c.Export(ctx, "b", "", "", &api); err != nil {
		t.Fatal(err)
	}
	h, err := tar.NewReader(&api).Next()
	if err != nil || h.Name != "f" || h.Size != 100_000 {
		t.Fatalf("export through the API: %+v %v", h, err)
	}
	api.Reset()
	if err := c.ChangeSet(ctx, "b", "", false, &api); err != nil {
		t.Fatal(err)
	}
	var got []results.Delta
	results.ReadChangeSet(&api, func(d results.Delta, _ io.Reader) error { got = append(got, d); return nil })
	if len(got) != 1 || got[0].Path != "f" || got[0].Old != nil || got[0].New.Size != 100_000 {
		t.Fatalf("change set through the API: %+v", got)
	}
	if _, err := c.Patch(ctx, "nosuch", "", &api); !errors.Is(err, branches.ErrNotFound) {
		t.Fatalf("patch of a missing branch: %v", err)
	}
	if _, err := c.Patch(ctx, "b", "nosuch", &api); !errors.Is(err, branches.ErrNotFound) {
		t.Fatalf("patch since a missing checkpoint: %v", err)
	}
}

// failingOutputs writes some bytes of a patch, then fails.
type failingOutputs struct {
	*branches.Manager
}

var errHalfway = errors.New("the disk went away")

func (f failingOutputs) Patch(ctx context.Context, name, since string, w io.Writer) (results.PatchStats, error) {
	fmt.Fprintf(w, "diff --git a/x b/x\n")
	return results.PatchStats{}, errHalfway
}

// TestStreamErrorMidway: an error after the first bytes reaches a client
// that reads trailers as an error, and cuts the stream for one that does
// not: neither takes a short answer for a whole one.
func TestStreamErrorMidway(t *testing.T) {
	m, dir := diskManager(t, 10)
	c := serveBackend(t, failingOutputs{m}, dir)
	var buf bytes.Buffer
	_, err := c.Patch(context.Background(), "b", "", &buf)
	if err == nil || !strings.Contains(err.Error(), "the disk went away") {
		t.Fatalf("client error: %v", err)
	}
	// Without TE: trailers, the stream has no final chunk.
	conn, err := net.Dial("unix", SocketPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	token := mustToken(t, dir)
	fmt.Fprintf(conn, "GET /v1/branches/b/diff?format=patch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", token)
	// The connection closes before the answer ends (here even before
	// its header, still in the server's buffer).
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		_, err = io.ReadAll(resp.Body)
	}
	if err == nil {
		t.Fatal("a stream cut by an error read as whole")
	}
}
