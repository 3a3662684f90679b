package importdir

// SetBeforeOpen makes f run between each entry's lstat and its open (or
// readlink), until the test ends.
func SetBeforeOpen(t interface{ Cleanup(func()) }, f func(rel string)) {
	beforeOpen = f
	t.Cleanup(func() { beforeOpen = nil })
}

// NoRacyWindow makes the cache trust stats of entries changed just before
// an import, until the test ends (tests write their trees just before).
func NoRacyWindow(t interface{ Cleanup(func()) }) {
	old := racyWindow
	racyWindow = 0
	t.Cleanup(func() { racyWindow = old })
}
