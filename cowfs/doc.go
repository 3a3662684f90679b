// Package cowfs is the copy-on-write filesystem of one branch view.
//
// A view is a stack of layers, top first. Writes go to the top layer; every
// layer below it is frozen. A read resolves top-down: an inode is the
// topmost record of its number, a directory entry the topmost record of its
// slot, a data block the topmost reference of its index (subject to the
// truncation cut each inode record carries). Whiteouts and inode tombstones
// hide what lower layers hold. Which frozen layers hold a record of an
// inode, and the topmost such record decoded, are cached per view, so reads
// cost O(layers that touched the inode), not O(depth), and the attributes
// of an inode seen before cost one point lookup (the top layer's). The
// cache holds at most Options.InodeCacheSize entries and
// Options.InodeCacheBytes of estimated memory, and is dropped whenever the
// view's stack changes and when the view is invalidated. The block
// references a READ resolves through the frozen layers are cached for the
// whole Store (readcache.go, bounded by Options.BlockCacheBytes), keyed by
// the inode and the frozen layers of the stack, so every view over the
// same frozen layers shares them; a store-level change of references
// (rechunk, coalesce, fold, merge) names the layers it changes, and only
// the entries of stacks holding one of those are dropped: a repeated READ
// of frozen data reads only the top layer.
//
// Names are form-insensitive and form-preserving (names.go): entries keep
// the bytes they were created with, and are hashed and compared in NFC, so
// the NFC and NFD spellings of a name are one name. Entries with an NFS
// client's silly-rename name are noted in a per-layer index, so a
// fast-path commit can drop them in O(their number) (silly.go).
//
// Data lives in fixed-size blocks (Options.BlockSize) stored once per
// BLAKE3 hash; small blocks are inline and all-zero blocks are references
// without content, so holes cost nothing. Store.Rechunk later cuts runs of
// stored blocks into content-defined chunks (chunk.go) and swaps the
// blocks' references for slices of those chunks, so shifted data is
// stored once.
//
// A Store (store.go, opened with Open over a kv.Store) owns every key
// cowfs defines, the id allocator, the block tracker and the options; views
// are made from it (Store.View, FreshView, OpenView), and so are new trees,
// merges, diffs, folds, prunes, rechunks, space accounting and the block
// sweep. Its Txn lets a caller write layer records in the same transaction
// as its own keys, which it reaches through Txn.KV and Store.KV. When
// several servers share the store (Options.Leases), block writers and
// block sweeps of all of them follow the handshake of xsweep.go.
//
// APIs: the inode-level calls in api.go (used by the NFS server), and the
// go-billy v5 filesystem returned by View.Billy (billy.Filesystem,
// billy.Change, symlinks, Link). Store.Merge and Store.Diff work on the
// layers a branch added above its fork base, in O(changes).
//
// Errors are unwrapped *fs.PathError values carrying a syscall.Errno.
// Concurrency: a View is safe for concurrent use; namespace changes are
// serialised per view, writes per inode, and every call is one kv
// transaction. cowfs knows nothing of branch names or lifecycle.
package cowfs
