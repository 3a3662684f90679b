package blobs

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/zeebo/blake3"
)

// Size is the length of a Key.
const Size = 32

// Key names a blob: the BLAKE3-256 of its content.
type Key [Size]byte

// Sum returns the key of data.
func Sum(data []byte) Key { return blake3.Sum256(data) }

// String is the key in lower-case hex, as object names spell it.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// ParseKey parses the hex form String returns.
func ParseKey(s string) (Key, error) {
	var k Key
	if len(s) != 2*Size {
		return k, fmt.Errorf("blobs: key %q is not %d hex digits", s, 2*Size)
	}
	if _, err := hex.Decode(k[:], []byte(s)); err != nil {
		return k, fmt.Errorf("blobs: key %q: %w", s, err)
	}
	return k, nil
}

// Store holds immutable blobs by key. Implementations are safe for
// concurrent use.
type Store interface {
	// Put stores data under key, which must be Sum(data); storing a key
	// again is harmless. When Put returns nil the blob is durable in the
	// store (for S3, the service acknowledged it).
	Put(ctx context.Context, key Key, data []byte) error
	// Get returns the content of key, or ErrNotFound. The caller owns the
	// slice.
	Get(ctx context.Context, key Key) ([]byte, error)
	// Has reports whether key is stored.
	Has(ctx context.Context, key Key) (bool, error)
	// Delete removes key; deleting an absent key is not an error.
	Delete(ctx context.Context, key Key) error
	// List calls fn for every stored key, in no set order, until fn
	// returns an error (which List returns).
	List(ctx context.Context, fn func(Key) error) error
	// Close releases the store; after it every method returns ErrClosed.
	Close() error
}

// Filler is a Store that can read a blob into the caller's buffer, so a
// reader that reads many blobs reuses its buffers (the Cache is one).
type Filler interface {
	// GetInto is Get that returns the content in buf (buf[:len]) when it
	// fits in cap(buf), in a new slice otherwise.
	GetInto(ctx context.Context, key Key, buf []byte) ([]byte, error)
}

// Creator is a Store that stores a blob unless it holds the key already,
// in one request: on S3 a PUT with If-None-Match: *, which the service
// refuses before it stores anything when the object exists. A writer
// that does not know whether the store holds a blob saves the existence
// check (a HEAD) before each new blob's upload that way, and a blob the
// store holds costs about that check rather than a whole upload. Every
// Store of this package is one (the Cache when its backing store is).
type Creator interface {
	// Create is Put unless key is stored already; it reports whether it
	// stored data. Either way, when it returns nil the blob is in the
	// store.
	Create(ctx context.Context, key Key, data []byte) (bool, error)
}

// Sizer is a Store that lists its blobs with their sizes; every Store of
// this package is one (the Cache when its backing store is).
type Sizer interface {
	// ListSizes is List with each blob's size in bytes.
	ListSizes(ctx context.Context, fn func(Key, int64) error) error
}

var (
	// ErrNotFound is returned by Get of an absent key.
	ErrNotFound = errors.New("blobs: not found")
	// ErrUnavailable is returned when the backing service did not answer
	// or kept failing for longer than the store retries: the operation
	// did not complete (a Put may or may not have stored the blob, which
	// is harmless: blobs are immutable). Try again later.
	ErrUnavailable = errors.New("blobs: storage unavailable")
	// ErrCorrupt is returned when content does not hash to its key: by
	// Put for the caller's data, by Get for what the service returned.
	ErrCorrupt = errors.New("blobs: content does not match its key")
	// ErrDenied is returned when the service refuses the request for its
	// credentials, permissions or bucket: retrying will not help.
	ErrDenied = errors.New("blobs: request refused")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("blobs: store closed")
)

// checkPut returns ErrCorrupt unless data hashes to key.
func checkPut(key Key, data []byte) error {
	if got := Sum(data); got != key {
		return fmt.Errorf("%w: Put of %d bytes under key %s, but they hash to %s", ErrCorrupt, len(data), key, got)
	}
	return nil
}

// Mem is a Store in memory, for tests.
type Mem struct {
	mu     sync.Mutex // protects the following
	blobs  map[Key][]byte
	closed bool
}

var (
	_ Store   = (*Mem)(nil)
	_ Sizer   = (*Mem)(nil)
	_ Creator = (*Mem)(nil)
)

// NewMem returns an empty Mem.
func NewMem() *Mem { return &Mem{blobs: map[Key][]byte{}} }

func (m *Mem) do(ctx context.Context, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	return fn()
}

func (m *Mem) Put(ctx context.Context, key Key, data []byte) error {
	if err := checkPut(key, data); err != nil {
		return err
	}
	return m.do(ctx, func() error { m.blobs[key] = slices.Clone(data); return nil })
}

func (m *Mem) Create(ctx context.Context, key Key, data []byte) (bool, error) {
	if err := checkPut(key, data); err != nil {
		return false, err
	}
	stored := false
	err := m.do(ctx, func() error {
		if _, ok := m.blobs[key]; !ok {
			m.blobs[key], stored = slices.Clone(data), true
		}
		return nil
	})
	return stored, err
}

func (m *Mem) Get(ctx context.Context, key Key) ([]byte, error) {
	var out []byte
	err := m.do(ctx, func() error {
		b, ok := m.blobs[key]
		if !ok {
			return fmt.Errorf("%w: %s", ErrNotFound, key)
		}
		out = slices.Clone(b)
		return nil
	})
	return out, err
}

func (m *Mem) Has(ctx context.Context, key Key) (bool, error) {
	var ok bool
	err := m.do(ctx, func() error { _, ok = m.blobs[key]; return nil })
	return ok, err
}

func (m *Mem) Delete(ctx context.Context, key Key) error {
	return m.do(ctx, func() error { delete(m.blobs, key); return nil })
}

func (m *Mem) List(ctx context.Context, fn func(Key) error) error {
	var keys []Key
	if err := m.do(ctx, func() error {
		for k := range m.blobs {
			keys = append(keys, k)
		}
		return nil
	}); err != nil {
		return err
	}
	for _, k := range keys {
		if err := fn(k); err != nil {
			return err
		}
	}
	return nil
}

func (m *Mem) ListSizes(ctx context.Context, fn func(Key, int64) error) error {
	type kn struct {
		k Key
		n int64
	}
	var all []kn
	if err := m.do(ctx, func() error {
		for k, b := range m.blobs {
			all = append(all, kn{k, int64(len(b))})
		}
		return nil
	}); err != nil {
		return err
	}
	for _, e := range all {
		if err := fn(e.k, e.n); err != nil {
			return err
		}
	}
	return nil
}

func (m *Mem) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// Corrupt replaces the content stored under key with data without
// checking it, to test what readers do with a service that returns wrong
// bytes.
func (m *Mem) Corrupt(key Key, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.blobs[key] = slices.Clone(data)
}
