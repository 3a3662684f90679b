package results

import "errors"

var (
	// ErrBadChangeSet is returned by ReadChangeSet for a stream that is
	// not a change set, or one cut short.
	ErrBadChangeSet = errors.New("results: malformed change set")
	// ErrUnsupported is returned for a file type a form cannot carry
	// (a FIFO, socket or device in a patch is skipped instead).
	ErrUnsupported = errors.New("results: unsupported file type")
)
