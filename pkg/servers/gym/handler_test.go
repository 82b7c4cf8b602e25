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

// Arg is ParseBody, then the one required argument validated as pydantic would: its value, or
// the 422 errors FastAPI gives (located at body.KEY), or ParseBody's error.
func TestArg(t *testing.T) {
	for _, c := range []struct {
		body, want, errs string
	}{
		{`{"count": 3}`, "3", ""},
		{`{"count": "4", "other": true}`, "4", ""},
		{`{"count": 5.0}`, "5", ""},
		{`{}`, "", `[{"type":"missing","loc":["body","count"],"msg":"Field required","input":{}}]`},
		{`{"count": 1.5}`, "", `[{"type":"int_from_float","loc":["body","count"],"msg":"Input should be a valid integer, got a number with a fractional part","input":1.5}]`},
		{`{"count": "x"}`, "", `[{"type":"int_parsing","loc":["body","count"],"msg":"Input should be a valid integer, unable to parse string as an integer","input":"x"}]`},
	} {
		n, err := Arg([]byte(c.body), "count", LaxInt)
		var verrs ValidationErrors
		switch {
		case c.errs == "" && (err != nil || n == nil || n.String() != c.want):
			t.Errorf("%s: %v, %v; want %s", c.body, n, err, c.want)
		case c.errs != "" && (!errors.As(err, &verrs) || n != nil || string(MarshalValue([]FieldError(verrs))) != c.errs):
			t.Errorf("%s: %v, %v; want the errors %s", c.body, n, err, c.errs)
		}
	}
	// A body that is no object is ParseBody's 422, the same error whatever the argument.
	for _, body := range []string{``, `[]`, `{"count":`} {
		_, want := ParseBody([]byte(body))
		if s, err := Arg([]byte(body), "city", LaxString); err == nil || s != "" || err.Error() != want.Error() {
			t.Errorf("%q: %q, %v; want %v", body, s, err, want)
		}
	}
	// RequiredAs adds to the errors it is given, after those already there.
	obj, err := ParseBody([]byte(`{"label": 7, "values": [1, "2"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var errs ValidationErrors
	errs.Add("missing", []any{"body", "id"}, "Field required", nil)
	label := RequiredAs(obj, "label", []any{"body"}, &errs, LaxString)
	values := RequiredAs(obj, "values", []any{"body"}, &errs, LaxIntList)
	if label != "" || len(values) != 2 || values[1].Int64() != 2 || len(errs) != 2 || fmt.Sprint(errs[1].Loc) != "[body label]" || errs[1].Type != "string_type" {
		t.Errorf("label %q values %v errors %+v", label, values, errs)
	}
}
