// Package lint holds tests that check the shape of the codebase rather
// than its behaviour: the dependency direction between packages, and which
// package may import which third-party storage engine. It has no code of
// its own.
package lint
