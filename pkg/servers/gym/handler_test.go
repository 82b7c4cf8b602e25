package gym

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

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

// writeError answers a DetailError (also wrapped) with its status and {"detail": …}, validation
// errors 422, anything else 500 with the error as a JSON string.
func TestWriteError(t *testing.T) {
	var verrs ValidationErrors
	verrs.Add("missing", []any{"body", "count"}, "Field required", nil)
	for _, c := range []struct {
		err    error
		status int
		body   string
	}{
		{&DetailError{Status: http.StatusNotFound, Detail: `no "x" here`}, 404, `{"detail":"no \"x\" here"}`},
		{fmt.Errorf("tool: %w", &DetailError{Status: http.StatusConflict, Detail: "Session not seeded"}), 409, `{"detail":"Session not seeded"}`},
		{verrs, 422, `{"detail":[{"type":"missing","loc":["body","count"],"msg":"Field required","input":null}]}`},
		{errors.New("boom"), 500, `"boom"`},
	} {
		rec := httptest.NewRecorder()
		writeError(rec, c.err)
		if rec.Code != c.status || rec.Body.String() != c.body {
			t.Errorf("%v: %d %s, want %d %s", c.err, rec.Code, rec.Body.String(), c.status, c.body)
		}
	}
	if got := (&DetailError{Status: 404, Detail: "gone"}).Error(); got != "Not Found: gone" {
		t.Errorf("Error() = %q", got)
	}
}
