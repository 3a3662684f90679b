//go:build !race

package nfsserver

// raceEnabled: the race detector is on, and multiplies memory use.
const raceEnabled = false
