package toolclient_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rollout-dev/rollout/pkg/toolclient"
)

// recorder is a RoundTripper that answers every request 200 {} and keeps what was sent.
type recorder struct {
	path string
	body []byte
	n    int
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.n++
	r.path = req.URL.Path
	r.body, _ = io.ReadAll(req.Body)
	req.Body.Close()
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("{}")), Header: http.Header{}, Request: req}, nil
}

// FuzzToolArguments sends arbitrary tool names and arguments, as a model may write them,
// through Session.CallTool (the path the loop takes once the name is one the row offers). It
// must never panic; a call that reaches the server goes to base/NAME with a body that is one
// JSON object in valid UTF-8 (the arguments, trimmed, or {} for none); any other call is
// failed with an "Error: ..." output for the model, in valid UTF-8, and sends nothing.
// The seed corpus is in testdata/fuzz/FuzzToolArguments.
func FuzzToolArguments(f *testing.F) {
	f.Add("increment", `{"by": 2}`)
	f.Fuzz(func(t *testing.T, name, arguments string) {
		rec := &recorder{}
		ts, err := toolclient.New("fuzz", "http://127.0.0.1:1/base", rec)
		if err != nil {
			t.Fatal(err)
		}
		res := ts.NewSession().CallTool(context.Background(), name, arguments)
		if rec.n == 0 {
			if !res.Failed || !strings.HasPrefix(res.Output, "Error: ") || res.Unreachable {
				t.Fatalf("not sent, but result %+v", res)
			}
			if !utf8.ValidString(res.Output) {
				t.Fatalf("error output is not valid UTF-8: %q", res.Output)
			}
			return
		}
		if rec.n != 1 || rec.path != "/base/"+name || res.Failed || res.Output != "{}" {
			t.Fatalf("sent %d requests to %q for name %q; result %+v", rec.n, rec.path, name, res)
		}
		body := rec.body
		if !utf8.Valid(body) || !json.Valid(body) || len(body) == 0 || body[0] != '{' {
			t.Fatalf("sent a body that is not one JSON object: %q (arguments %q)", body, arguments)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(body, &obj); err != nil {
			t.Fatalf("sent %q: %v", body, err)
		}
		if want := strings.TrimSpace(arguments); want != "" && string(body) != want {
			t.Fatalf("sent %q for arguments %q", body, arguments)
		}
	})
}
