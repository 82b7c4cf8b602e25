package jsonfast

// LineKeys reads the int64 members named a and b, and the string member named c if c is
// not empty (its bytes, in line), of the JSON object that is the whole of line, checking the whole line as
// encoding/json does when it decodes it into a struct of those three fields: every other
// member is skipped (checked, not read). ok is false when the fast path cannot be sure:
// invalid JSON, a member repeated or named like a wanted one in another case, a value of
// another type. A wanted member that is absent or null is left zero; has says which were
// present and not null.
func LineKeys(line []byte, a, b, c string) (ka, kb int64, kc []byte, has int, ok bool) {
	i := SkipSpace(line, 0)
	if i >= len(line) || line[i] != '{' {
		return
	}
	i = SkipSpace(line, i+1)
	if i < len(line) && line[i] == '}' {
		return 0, 0, nil, 0, SkipSpace(line, i+1) == len(line)
	}
	seen := 0
	for {
		if i >= len(line) || line[i] != '"' {
			return
		}
		kend, flags := ScanString(line, i)
		if kend < 0 || flags&StrEscaped != 0 {
			return
		}
		key := line[i+1 : kend-1]
		which := 0
		switch {
		case string(key) == a:
			which = 1
		case string(key) == b:
			which = 2
		case c != "" && string(key) == c:
			which = 4
		case EqualFoldASCII(key, a) || EqualFoldASCII(key, b) || c != "" && EqualFoldASCII(key, c):
			return // encoding/json matches keys regardless of case
		case flags&StrHigh != 0:
			return // a non-ASCII key might fold to a wanted one
		}
		if seen&which != 0 {
			return
		}
		seen |= which
		i = SkipSpace(line, kend)
		if i >= len(line) || line[i] != ':' {
			return
		}
		i = SkipSpace(line, i+1)
		if which != 0 && HasLiteral(line, i, "null") {
			i += 4
		} else {
			switch which {
			case 0:
				i = SkipValue(line, i, 1)
			case 1, 2:
				var n int64
				var okn bool
				if n, i, okn = ParseInt(line, i, 64); !okn {
					return
				}
				if which == 1 {
					ka = n
				} else {
					kb = n
				}
				has |= which
			case 4:
				if i >= len(line) || line[i] != '"' {
					return
				}
				end, flags := ScanString(line, i)
				if end < 0 || flags != 0 {
					return // escapes or non-ASCII: left to encoding/json
				}
				kc = line[i+1 : end-1]
				i = end
				has |= which
			}
			if i < 0 {
				return
			}
		}
		i = SkipSpace(line, i)
		if i >= len(line) {
			return
		}
		if line[i] == '}' {
			return ka, kb, kc, has, SkipSpace(line, i+1) == len(line)
		}
		if line[i] != ',' {
			return
		}
		i = SkipSpace(line, i+1)
	}
}

// EqualFoldASCII reports whether key equals name (ASCII, lower case) regardless of case.
func EqualFoldASCII(key []byte, name string) bool {
	if len(key) != len(name) {
		return false
	}
	for i, c := range key {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			return false
		}
	}
	return true
}
