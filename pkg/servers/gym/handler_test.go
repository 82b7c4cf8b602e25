package gym

import "testing"

func TestPythonJSON(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":"x,\"y\":z","b":[1,2]}`: `{"a": "x,\"y\":z", "b": [1, 2]}`,
		`{"a":"x\\","b":{}}`:          `{"a": "x\\", "b": {}}`,
		`{"é":"ü€"}`:                  `{"\u00e9": "\u00fc\u20ac"}`,
		`[]`:                          `[]`,
	} {
		if got := string(pythonJSON([]byte(in))); got != want {
			t.Errorf("pythonJSON(%s) = %s, want %s", in, got, want)
		}
	}
	for f, want := range map[float64]string{1: "1.0", 0: "0.0", 0.5: "0.5", 2.0 / 3: "0.6666666666666666", 1e21: "1e+21"} {
		if got, _ := PyFloat(f).MarshalJSON(); string(got) != want {
			t.Errorf("pyFloat(%v) = %s, want %s", f, got, want)
		}
	}
}
