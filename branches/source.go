package branches

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/branchnfs/branchnfs/kv"
)

// The source folder of main: the directory main was imported from (init
// or serve --from), kept so that `import --update` can bring that
// folder's own changes into main again and `apply` writes a branch's
// changes back into it by default. Stored under key 'F' as JSON.

var sourceKey = []byte{'F'}

type sourceRec struct {
	Dir string `json:"dir"`
}

// SetSourceDir records dir, which must be an absolute path, as the folder
// main was imported from.
func (m *Manager) SetSourceDir(ctx context.Context, dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("branches: source folder %q is not an absolute path", dir)
	}
	v, err := json.Marshal(sourceRec{Dir: filepath.Clean(dir)})
	if err != nil {
		return err
	}
	if err := m.opts.Store.Update(ctx, func(tx kv.Txn) error { return tx.Set(sourceKey, v) }); err != nil {
		return fmt.Errorf("branches: record the source folder: %w", mapErr(err))
	}
	return nil
}

// SourceDir returns the folder main was imported from, or "" when main
// was not imported from a folder (or was, by a version that did not
// record it).
func (m *Manager) SourceDir(ctx context.Context) (string, error) {
	var rec sourceRec
	err := m.opts.Store.View(ctx, func(tx kv.Txn) error {
		v, err := tx.Get(sourceKey)
		if errors.Is(err, kv.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return json.Unmarshal(v, &rec)
	})
	if err != nil {
		return "", fmt.Errorf("branches: read the source folder: %w", mapErr(err))
	}
	return rec.Dir, nil
}
