package branches

// IgnoreMatch reports whether path p is ignored by patterns.
func IgnoreMatch(patterns []string, p string) (bool, error) {
	s, err := compileIgnoreSet(patterns)
	if err != nil {
		return false, err
	}
	return s.match(p), nil
}
