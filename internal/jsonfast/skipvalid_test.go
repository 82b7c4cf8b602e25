package jsonfast

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSkipValid checks SkipValid against SkipValue (which checks what it skips) and against
// encoding/json's Decoder.InputOffset on valid values followed by more JSON, nested past
// SkipValue's limit too.
func TestSkipValid(t *testing.T) {
	deep := strings.Repeat("[", 3000) + strings.Repeat("]", 3000)
	for _, v := range []string{
		`"a\"b\\"`, `{}`, `{"a":[1,{"b":"]}"}],"c":"\\"}`, `[1, 2 , "x" ,[]]`, `-12.5e3`, `true`, `false`, `null`,
		`{"k":"v\u0022}"}`, `"é\u00e9"`, deep,
	} {
		for _, tail := range []string{"", ",1", " ]", "}", "\n"} {
			b := []byte(" " + v + tail)
			got := SkipValid(b, 1)
			if want := 1 + len(v); got != want {
				t.Errorf("SkipValid(%.30q) = %d, want %d", b, got, want)
			}
			if len(v) < 1000 {
				if want := SkipValue(b, 1, 0); got != want {
					t.Errorf("SkipValid(%.30q) = %d, SkipValue %d", b, got, want)
				}
			}
			dec := json.NewDecoder(strings.NewReader(v))
			var x json.RawMessage
			if err := dec.Decode(&x); err != nil || int(dec.InputOffset()) != len(v) {
				t.Errorf("encoding/json reads %.30q to %d (%v), not as one value", v, dec.InputOffset(), err)
			}
		}
	}
}
