package cowfs

import "github.com/branchnfs/branchnfs/kv"

// Space accounting (branches' status and list): what a layer's keys take
// and how large each stored content is, told from the store's sizes
// without reading block contents where the store can.

// ContentSizes calls fn with every stored content hash and the bytes of
// its content, until fn returns false.
func ContentSizes(tx kv.Txn, fn func(h []byte, size int64) bool) error {
	return kv.IterateSizes(tx, []byte{pfxContent}, func(k []byte, size int64) (bool, error) {
		return fn(k[1:], size), nil
	})
}

// LayerSize returns how many keys layer l holds (inodes, entries, block
// references, its record) and their bytes, keys and values: what deleting
// the layer removes, not counting the content its references use.
func LayerSize(tx kv.Txn, l LayerID) (keys int, bytes int64, err error) {
	err = kv.IterateSizes(tx, layerPrefix(l), func(k []byte, size int64) (bool, error) {
		keys++
		bytes += int64(len(k)) + size
		return true, nil
	})
	if err != nil {
		return 0, 0, err
	}
	if ok, err := tx.Has(layerKey(l)); err != nil {
		return 0, 0, err
	} else if ok {
		keys++
		bytes += int64(len(layerKey(l))) + 8
	}
	return keys, bytes, nil
}
