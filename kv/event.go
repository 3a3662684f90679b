package kv

// Event is one change of a watched key, as a store shared by several
// servers reports it (etcdkv.Coord.Watch): what a server needs to learn
// of the others' changes.
type Event struct {
	Key      []byte // without the store's key prefix
	Value    []byte // nil for a deletion
	Deleted  bool   // deleted, or gone with its lease
	Revision int64  // the store's revision of the change
}
