package jsonfast

// SkipValidString returns the index just past the string that starts at b[i] (a quote) of
// valid JSON.
func SkipValidString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// SkipValid returns the index just past the value that starts at b[i] of b, which must be
// valid JSON (checked before, e.g. by Valid): it does not check anything, so brackets must
// balance. Nesting is followed with a counter, not recursion, so any depth is fine; on valid
// input it is faster than SkipValue, which checks.
func SkipValid(b []byte, i int) int {
	switch b[i] {
	case '"':
		return SkipValidString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = SkipValidString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	}
	// A number, true, false or null.
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}
