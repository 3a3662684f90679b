// Package blobs stores immutable content by the hash of its bytes: the
// blocks of a scale-out store, kept in S3-compatible object storage while
// the metadata lives in a kv.Store.
//
// A Key is the BLAKE3-256 of the content, the hash cowfs names its blocks
// by. Every Store checks it: Put refuses data that does not hash to its
// key, and Get returns ErrCorrupt rather than bytes that do not.
//
// Implementations:
//   - S3 (OpenS3, ParseS3URL): an S3-compatible bucket through minio-go,
//     configured by an s3://bucket/prefix?endpoint=host:port URL and the
//     usual AWS credential variables. Transient failures (the network,
//     5xx answers, throttling) are retried with exponential backoff for
//     S3Options.RetryFor; past that an operation fails with
//     ErrUnavailable, naming the endpoint and what to check.
//   - Cache (OpenCache): a bounded cache on local disk in front of any
//     Store. Reads are served from it when they can, its files' hashes
//     checked on their first read and again whenever a file's identity
//     (fstat: device, inode, size, times) changes (a corrupt file is
//     dropped and fetched again); files stay open between reads, up to
//     CacheOptions.OpenFiles; writes go
//     through to the backing store before they return; the least recently
//     used files are evicted past Options.MaxBytes; the cache survives a
//     restart.
//   - Mem (NewMem): a map, for tests.
//
// Errors: ErrNotFound for an absent key, ErrUnavailable when the backing
// service cannot be reached (a caller answers NFS3ERR_JUKEBOX or
// NFS3ERR_IO), ErrCorrupt for content that does not match its key,
// ErrDenied when the service refuses the credentials or the bucket, and
// ErrClosed after Close.
package blobs
