package verify_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/testnet"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/toolclient"
	"github.com/rollout-dev/rollout/pkg/verify"
)

// Hostile verify answers are verify failures with a specific message, never a reward.
func TestParseHostileAnswers(t *testing.T) {
	cases := map[string]struct{ answer, want string }{
		"trailing junk":         {`{"reward":1} garbage`, "verify: the answer is not valid JSON (trailing data after the JSON value at byte 13)"},
		"two objects":           {`{"reward":1}{"reward":0}`, "verify: the answer is not valid JSON (trailing data after the JSON value at byte 12)"},
		"trailing NUL":          {"{\"reward\":1}\x00", "verify: the answer is not valid JSON (trailing data after the JSON value at byte 12)"},
		"truncated":             {`{"reward":1,"accuracy":tr`, "verify: the answer is not valid JSON (truncated: unexpected end of JSON input)"},
		"truncated string":      {`{"reward":1,"reason":"miss`, "verify: the answer is not valid JSON (truncated: unexpected end of JSON input)"},
		"html":                  {"<!DOCTYPE html><html><body><h1>500 Internal Server Error</h1></body></html>", "verify: the answer is not valid JSON (invalid character '<' looking for beginning of value at byte 0): <!DOCTYPE html>"},
		"empty":                 {"", "verify: the answer is not valid JSON (empty): "},
		"whitespace":            {" \n", "verify: the answer is not valid JSON (empty)"},
		"array":                 {`[{"reward":1}]`, "verify: the answer is an array, not a JSON object"},
		"string":                {`"{\"reward\":1}"`, "verify: the answer is a string, not a JSON object"},
		"duplicate reward":      {`{"reward":0,"reward":1}`, "verify: the answer has more than one reward"},
		"reward NaN":            {`{"reward":NaN}`, "verify: the answer is not valid JSON (invalid character 'N' looking for beginning of value at byte 10)"},
		"reward overflow":       {`{"reward":1e400}`, "verify: reward is 1e400, want a number"},
		"deep nesting":          {`{"reward":1,"x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`, "verify: the answer is not valid JSON (invalid character '[' exceeded max depth at byte"},
		"invalid UTF-8 string":  {"{\"reward\":1,\"r\":\"\xff\"}", ""}, // encoding/json takes it: a reward
		"reward 1e200":          {`{"reward":1e200}`, "verify: reward 1e+200 is outside the sane range [-1e+06, 1e+06]"},
		"reward -1e200":         {`{"reward":-1e200}`, "verify: reward -1e+200 is outside the sane range"},
		"reward just over":      {`{"reward":1000000.5}`, "verify: reward 1.0000005e+06 is outside the sane range"},
		"component 1e300":       {`{"reward":1,"accuracy":1e300}`, "verify: reward component accuracy is 1e+300, outside the sane range"},
		"reward_components big": {`{"reward":1,"reward_components":{"a":-1e7}}`, "verify: reward component a is -1e+07, outside the sane range"},
		"slow path big reward":  {"{\"reward\":1e200,\"r\":\"\xff\"}", "verify: reward 1e+200 is outside the sane range"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := verify.Parse([]byte(c.answer), nil)
			if c.want == "" {
				if err != nil || r.Reward != 1 {
					t.Fatalf("err %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted: reward %v", r.Reward)
			}
			if !verify.IsError(err) || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("error %q\nwant prefix %q", err, c.want)
			}
			if len(err.Error()) > 500 {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
		})
	}
	// A "reward" inside reward_components is not a component: the reward is the answer's own.
	if r, err := verify.Parse([]byte(`{"reward":0.5,"reward_components":{"reward":2,"a":1}}`), nil); err != nil || r.Reward != 0.5 || len(r.Components) != 1 || r.Components["a"] != 1 {
		t.Fatalf("result %+v err %v", r, err)
	}
	// White space around the object is fine.
	if r, err := verify.Parse([]byte(" \r\n{\"reward\": 0.5}\n\n"), nil); err != nil || r.Reward != 0.5 {
		t.Fatalf("reward %v err %v", r, err)
	}
}

// serverAnswering is a verify endpoint behind a session, with fast retries.
func serverAnswering(t *testing.T, h http.HandlerFunc) (*toolclient.Server, func() int) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		n++
		mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	ts, err := toolclient.New("v", srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts.Retry = retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}
	return ts, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// hijack answers with raw bytes on the connection, then closes it.
func hijack(w http.ResponseWriter, raw string) { testnet.RawAnswer(w, raw) }

// A verify answer whose connection closes mid-body is retried (the answer is read within the
// attempt), and the attempts are counted; one that always breaks is a verify error that says
// what broke.
func TestRemoteMidBodyClose(t *testing.T) {
	var mu sync.Mutex
	k := 0
	ts, calls := serverAnswering(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		k++
		first := k == 1
		mu.Unlock()
		if first {
			hijack(w, "HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{\"reward\":")
			return
		}
		io.WriteString(w, `{"reward":1}`)
	})
	var c retry.Counter
	ctx := retry.WithCounter(context.Background(), &c)
	r, err := verify.Remote(ctx, ts.NewSession(), []byte(`{}`), nil)
	if err != nil || r.Reward != 1 || calls() != 2 || c.Attempts() != 2 {
		t.Fatalf("reward %v err %v calls %d attempts %d", r, err, calls(), c.Attempts())
	}

	ts, calls = serverAnswering(t, func(w http.ResponseWriter, r *http.Request) {
		hijack(w, "HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{\"reward\":")
	})
	_, err = verify.Remote(context.Background(), ts.NewSession(), []byte(`{}`), nil)
	if !verify.IsError(err) || !strings.Contains(err.Error(), "reading the answer (HTTP 200): unexpected EOF") || !errors.Is(err, io.ErrUnexpectedEOF) || calls() != 3 {
		t.Fatalf("err %v calls %d", err, calls())
	}
}

// An HTML 502 page from /verify is a verify error with the status and the start of the page.
func TestRemoteHTML(t *testing.T) {
	page := "<html><head><title>502 Bad Gateway</title></head><body>" + strings.Repeat("<p>nginx</p>", 500) + "</body></html>"
	ts, calls := serverAnswering(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(502)
		io.WriteString(w, page)
	})
	_, err := verify.Remote(context.Background(), ts.NewSession(), []byte(`{}`), nil)
	var ve *verify.Error
	if !errors.As(err, &ve) || ve.Status != 502 || !strings.HasPrefix(err.Error(), "verify: HTTP 502: <html><head><title>502 Bad Gateway") || len(err.Error()) > 400 || calls() != 3 {
		t.Fatalf("err %v calls %d", err, calls())
	}
	// A 200 HTML page is not JSON.
	ts, _ = serverAnswering(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, page) })
	_, err = verify.Remote(context.Background(), ts.NewSession(), []byte(`{}`), nil)
	if !verify.IsError(err) || !strings.Contains(err.Error(), "is not valid JSON (invalid character '<'") {
		t.Fatalf("err %v", err)
	}
}

// A 100 MB verify answer is cut at MaxBodyBytes and is a verify error naming the cap.
func TestRemoteHugeAnswer(t *testing.T) {
	chunk := strings.Repeat(" ", 1<<20)
	ts, calls := serverAnswering(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"reward":1,"pad":"`)
		for range 100 {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		io.WriteString(w, `"}`)
	})
	ts.MaxBodyBytes = 1 << 20
	_, err := verify.Remote(context.Background(), ts.NewSession(), []byte(`{}`), nil)
	if !verify.IsError(err) || err.Error() != "verify: the answer was longer than 1 MiB" || calls() != 1 {
		t.Fatalf("err %v calls %d", err, calls())
	}
}

// A server that accepts the connection and never answers costs each /verify attempt its
// call timeout, then a verify error that names the timeout, in which errors.Is finds
// context.DeadlineExceeded (the runner classes it timeout), in bounded time.
func TestRemoteSilentServerTimesOut(t *testing.T) {
	url, _ := testnet.Silent(t)
	ts, err := toolclient.New("v", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts.Retry = retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}
	ts.CallTimeout = 100 * time.Millisecond
	var c retry.Counter
	ctx := retry.WithCounter(context.Background(), &c)
	start := time.Now()
	_, err = verify.Remote(ctx, ts.NewSession(), []byte(`{}`), nil)
	if !verify.IsError(err) || !errors.Is(err, context.DeadlineExceeded) ||
		!strings.HasPrefix(err.Error(), "verify: no answer within the attempt timeout of 100ms: ") {
		t.Fatalf("err %v", err)
	}
	if el := time.Since(start); el > 5*time.Second || c.Attempts() != 3 {
		t.Fatalf("took %v, %d attempts", el, c.Attempts())
	}
}

// Rewards at the bound are rewards.
func TestParseRewardAtTheBound(t *testing.T) {
	for _, answer := range []string{`{"reward":1000000}`, `{"reward":-1e6,"accuracy":1e6}`} {
		if r, err := verify.Parse([]byte(answer), nil); err != nil || math.Abs(r.Reward) != verify.MaxAbsReward {
			t.Errorf("%s: %v, %v", answer, r, err)
		}
	}
}
