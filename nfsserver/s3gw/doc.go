// Package s3gw serves the live branches of a store over the S3 API: a
// bucket is a live branch, a key is a path in it. It implements
// versitygw's backend.Backend over branches.Manager views and runs
// versitygw's S3 front end (SigV4, routing, XML) in-process.
//
// # Mapping
//
//   - ListBuckets lists the live branches. Branch names are S3 bucket
//     names as they are ([A-Za-z0-9._-]{1,64}); strict S3 bucket-name
//     rules are off, so main, My_Branch and a.b all work with path-style
//     addressing (virtual-host addressing needs DNS-safe names).
//   - CreateBucket forks main, or the branch named in the
//     X-Branchnfs-Parent header; DeleteBucket aborts the branch.
//   - A key is a slash-separated path; directories are made as needed and
//     are CommonPrefixes in listings, which run in S3's byte order (a
//     directory sorts as its name plus "/"). Keys with empty, "." or ".."
//     segments are refused.
//   - PutObject writes to a hidden temporary (TempPrefix, in the key's
//     directory) and renames it onto the key, so readers (NFS or S3) see
//     the old object or the new one, never part of one. Temporaries are on
//     the store's ignore list, and listings hide them.
//   - ETags are the MD5 of the content when the server saw it whole (a
//     PutObject, a full GetObject, or a small file read on demand: see
//     etag.go), kept per inode version (number, generation, size, mtime,
//     ctime), so any write through NFS invalidates it. Other files get a
//     stable ETag in S3's multipart form (hex-1), which clients do not take
//     for an MD5.
//
// # Errors
//
// cowfs errno values and branches sentinels map to S3 errors in one place
// (errors.go): a missing or invalidated branch is NoSuchBucket with a
// message saying why, a read-only view is AccessDenied.
//
// # Authentication
//
// Every request must be signed (SigV4) with the store's access key and
// secret (EnsureCredentials: STORE/s3.credentials, mode 0600); anonymous
// requests are refused.
package s3gw
