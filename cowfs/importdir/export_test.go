package importdir

// SetBeforeOpen makes f run between each entry's lstat and its open (or
// readlink), until the test ends.
func SetBeforeOpen(t interface{ Cleanup(func()) }, f func(rel string)) {
	beforeOpen = f
	t.Cleanup(func() { beforeOpen = nil })
}
