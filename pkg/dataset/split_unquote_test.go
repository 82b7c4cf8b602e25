package dataset

import (
	"encoding/json"
	"testing"
)

// TestUnquoteMatchesEncodingJSON: the keys of a split row read as encoding/json reads them,
// escapes, surrogates and invalid UTF-8 included, and its errors for what is not a string.
func TestUnquoteMatchesEncodingJSON(t *testing.T) {
	for _, q := range []string{
		`"plain"`, `""`, `"a\"b\\c\/d"`, `"\u00e9\n\t"`, `"\ud83d\ude00"`, `"\ud83d"`, "\"\xff\xfe\"",
		`"é"`, "\"a\xc3\"", `"x`, `x"`, `"\q"`, "\"a\x01\"", `1`,
	} {
		var want string
		werr := json.Unmarshal([]byte(q), &want)
		got, err := unquote([]byte(q))
		if (err == nil) != (werr == nil) || got != want {
			t.Errorf("unquote(%q) = %q, %v; encoding/json %q, %v", q, got, err, want, werr)
		}
	}
}
