package toolclient_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/pkg/toolclient"
)

// BenchmarkSession is one rollout's session over loopback HTTP: seed_session, two tool calls
// and verify, against a server that sets its session cookie on every answer as NeMo Gym's
// servers do (Starlette's SessionMiddleware: Path=/, Max-Age, HttpOnly, SameSite=lax).
func BenchmarkSession(b *testing.B) {
	const cookie = "NeMoGym___counter=eyJzaWQiOiAiMTIzNDUifQ==.aAbBcC.c2lnbmF0dXJlLXNpZ25hdHVyZQ; path=/; Max-Age=1209600; httponly; samesite=lax"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header()["Set-Cookie"] = []string{cookie}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"count": 1, "reward": 1.0}`)
	}))
	defer srv.Close()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	defer tr.CloseIdleConnections()
	ts, err := toolclient.New("bench", srv.URL, tr)
	if err != nil {
		b.Fatal(err)
	}
	ts.CallTimeout = time.Minute
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		sess := ts.NewSession()
		if err := sess.Seed(ctx, []byte(`{"id": 1}`)); err != nil {
			b.Fatal(err)
		}
		for range 2 {
			if res := sess.CallTool(ctx, "increment_counter", `{"count": 1}`); res.Failed {
				b.Fatal(res.Output)
			}
		}
		if _, _, err := sess.PostVerify(ctx, []byte(`{"response": {}}`)); err != nil {
			b.Fatal(err)
		}
	}
}
