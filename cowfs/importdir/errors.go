package importdir

import "errors"

// ErrChanged is returned (wrapped, with the path) when an entry of the
// source changed between the moment the import listed it and the moment it
// read it: a directory or file replaced by a symlink, a FIFO or a device,
// another file put in its place, or a file that grew or shrank while it was
// read. The import reads nothing it did not list: run it again once the
// source stays still.
var ErrChanged = errors.New("importdir: changed during the import")

// ErrGitOutside is returned (wrapped, with the path and the fix) for a
// `.git` file below the top of the source naming a git directory outside
// the source: a branch's git would write into the host's repository.
var ErrGitOutside = errors.New("importdir: a git directory outside the source")
