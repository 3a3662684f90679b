package cowfs

import "github.com/branchnfs/branchnfs/kv"

// LayerKeyLen bounds the length of the keys a layer holds (see keys.go).
const LayerKeyLen = 26

// DeleteBatch is how many keys of at most keyLen bytes one transaction of
// the store may delete: 4,096 (which bounds the memory of a batch), or
// fewer when the kv store's Limits say so (128 with etcd's defaults).
func (s *Store) DeleteBatch(keyLen int) int { return deleteBatch(s.kv, keyLen) }

func deleteBatch(store kv.Store, keyLen int) int {
	l := store.Limits()
	return min(4096, l.Batch(1, keyLen+l.OpBytes))
}
