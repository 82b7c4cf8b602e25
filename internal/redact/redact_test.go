package redact

import (
	"slices"
	"testing"
)

func TestReplacer(t *testing.T) {
	for _, tt := range []struct {
		secrets []string
		in, out string
		kept    []string
	}{
		{nil, "sk-abcdefgh", "sk-abcdefgh", nil},
		{[]string{"x", "EMPTY", "short77"}, "x EMPTY short77", "x EMPTY short77", nil},
		{[]string{"sk-abcdefgh", "x"}, "key sk-abcdefgh, x", "key [REDACTED], x", []string{"sk-abcdefgh"}},
		{[]string{"12345678", "abcdefghij"}, "12345678/abcdefghij/1234567", "[REDACTED]/[REDACTED]/1234567", []string{"12345678", "abcdefghij"}},
	} {
		if got := Secrets(tt.secrets); !slices.Equal(got, tt.kept) {
			t.Errorf("Secrets(%q) = %q, want %q", tt.secrets, got, tt.kept)
		}
		r := Replacer(tt.secrets)
		if (r == nil) != (tt.kept == nil) {
			t.Fatalf("Replacer(%q) = %v", tt.secrets, r)
		}
		got := tt.in
		if r != nil {
			got = r.Replace(tt.in)
		}
		if got != tt.out {
			t.Errorf("%q with %q: %q, want %q", tt.in, tt.secrets, got, tt.out)
		}
	}
}
