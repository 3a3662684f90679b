// Package release checks what a release and `go install` build: the four
// release targets of .goreleaser.yaml build with its ldflags, and the
// module installs with `go install module@version` from a module proxy,
// as a user's go command fetches it.
package release
