package verify_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/toolclient"
	"github.com/rollout-dev/rollout/pkg/verify"
)

func TestParse(t *testing.T) {
	rowKeys := []string{"id", "responses_create_params", "expected_synonyms", "ground_truth"}
	cases := []struct {
		name   string
		answer string
		reward float64
		comps  map[string]float64
	}{
		{"reward only", `{"reward": 1.0}`, 1, nil},
		{"integer reward", `{"reward": 0}`, 0, nil},
		{"numbers and bools", `{"reward":0.5,"accuracy":true,"set_overlap":0.25,"minefield_hit":false,"parsed":["a"],"note":"x","nested":{"a":1}}`,
			0.5, map[string]float64{"accuracy": 1, "set_overlap": 0.25, "minefield_hit": 0}},
		{"echoed row keys excluded", `{"reward":1,"id":7,"ground_truth":3,"expected_synonyms":["a"],"responses_create_params":{},"response":{"id":"r"},"accuracy":1}`,
			1, map[string]float64{"accuracy": 1}},
		{"reward_components merged", `{"reward":0.75,"accuracy":1,"reward_components":{"format":0.5,"correct":true,"accuracy":0}}`,
			0.75, map[string]float64{"format": 0.5, "correct": 1, "accuracy": 0}},
		{"null reward_components", `{"reward":1,"reward_components":null}`, 1, nil},
		{"null fields are not components", `{"reward":1,"extracted_answer":null,"reward_components":{"a":null,"b":2}}`, 1, map[string]float64{"b": 2}},
		{"negative and exponent", `{"reward":-1e-3,"penalty":-2E2}`, -0.001, map[string]float64{"penalty": -200}},
		{"huge component skipped", `{"reward":1,"big":1e400}`, 1, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := verify.Parse([]byte(c.answer), rowKeys)
			if err != nil {
				t.Fatal(err)
			}
			if r.Reward != c.reward || !reflect.DeepEqual(r.Components, c.comps) || string(r.Answer) != c.answer {
				t.Fatalf("reward %v components %v answer %s", r.Reward, r.Components, r.Answer)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for name, answer := range map[string]string{
		"missing reward":         `{"accuracy":1}`,
		"null reward":            `{"reward":null}`,
		"string reward":          `{"reward":"1.0"}`,
		"NaN string":             `{"reward":"NaN"}`,
		"bare NaN":               `{"reward":NaN}`,
		"Infinity":               `{"reward":Infinity}`,
		"overflow":               `{"reward":1e999}`,
		"bool reward":            `{"reward":true}`,
		"object reward":          `{"reward":{"value":1}}`,
		"array":                  `[{"reward":1}]`,
		"number":                 `1`,
		"null":                   `null`,
		"empty":                  ``,
		"html":                   `<html>Internal Server Error</html>`,
		"truncated":              `{"reward":1`,
		"bad reward_components":  `{"reward":1,"reward_components":[1,2]}`,
		"string in components":   `{"reward":1,"reward_components":{"a":"high"}}`,
		"overflow in components": `{"reward":1,"reward_components":{"a":1e999}}`,
		"reward_components is 1": `{"reward":1,"reward_components":1}`,
	} {
		t.Run(name, func(t *testing.T) {
			r, err := verify.Parse([]byte(answer), nil)
			if err == nil {
				t.Fatalf("accepted: reward %v components %v", r.Reward, r.Components)
			}
			var ve *verify.Error
			if !errors.As(err, &ve) || !verify.IsError(err) || !strings.HasPrefix(err.Error(), "verify: ") {
				t.Fatalf("error %T %v, want *verify.Error", err, err)
			}
		})
	}
	if verify.IsError(errors.New("other")) || verify.IsError(nil) {
		t.Fatal("IsError of a non-verify error")
	}
}

// A long answer is cut in the error message, on a character boundary.
func TestParseErrorShort(t *testing.T) {
	answer := `{"detail":"` + strings.Repeat("é", 400) + `"}`
	_, err := verify.Parse([]byte(answer), nil)
	if err == nil || len(err.Error()) > 400 || !strings.HasSuffix(err.Error(), "…") {
		t.Fatalf("error %d bytes: %v", len(err.Error()), err)
	}
	if s := err.Error(); strings.ToValidUTF8(s, "?") != s {
		t.Fatalf("error is not valid UTF-8: %q", s)
	}
}

// verifyServer answers /verify with code and body, counting calls.
func verifyServer(t *testing.T, code int, body string) (*toolclient.Session, func() int) {
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/verify" || r.Method != http.MethodPost {
			t.Errorf("%s %s", r.Method, r.URL.Path)
		}
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		n++
		mu.Unlock()
		w.WriteHeader(code)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	ts, err := toolclient.New("v", srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts.Retry = retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}
	return ts.NewSession(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func TestRemote(t *testing.T) {
	sess, calls := verifyServer(t, 200, `{"reward":1.0,"accuracy":true,"expected_count":3}`)
	r, err := verify.Remote(context.Background(), sess, []byte(`{"expected_count":3,"response":{}}`), []string{"expected_count"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Reward != 1 || !reflect.DeepEqual(r.Components, map[string]float64{"accuracy": 1}) || calls() != 1 {
		t.Fatalf("reward %v components %v calls %d", r.Reward, r.Components, calls())
	}
}

// An HTTP 500 from /verify is a verify error with the status and the body,
// after the retries; never a reward of 0.
func TestRemoteHTTP500(t *testing.T) {
	sess, calls := verifyServer(t, 500, `Traceback (most recent call last): KeyError: 'expected_count'`)
	r, err := verify.Remote(context.Background(), sess, []byte(`{}`), nil)
	if err == nil {
		t.Fatalf("accepted: %+v", r)
	}
	var ve *verify.Error
	if !errors.As(err, &ve) || ve.Status != 500 || !strings.Contains(err.Error(), "HTTP 500") || !strings.Contains(err.Error(), "KeyError") {
		t.Fatalf("error %#v", err)
	}
	if calls() != 3 {
		t.Fatalf("%d calls, want 3 (5xx is retried)", calls())
	}
}

func TestRemote4xxNotRetried(t *testing.T) {
	sess, calls := verifyServer(t, 422, `{"detail":"responses_create_params: extra fields not permitted"}`)
	_, err := verify.Remote(context.Background(), sess, []byte(`{}`), nil)
	var ve *verify.Error
	if !errors.As(err, &ve) || ve.Status != 422 || !strings.Contains(ve.Msg, "extra fields") || calls() != 1 {
		t.Fatalf("error %v calls %d", err, calls())
	}
}

// A transport failure is a verify error without a status.
func TestRemoteUnreachable(t *testing.T) {
	ts, err := toolclient.New("v", "http://127.0.0.1:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	ts.Retry = retry.Policy{MaxAttempts: 2, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}
	_, err = verify.Remote(context.Background(), ts.NewSession(), []byte(`{}`), nil)
	var ve *verify.Error
	if !errors.As(err, &ve) || ve.Status != 0 {
		t.Fatalf("error %#v", err)
	}
}
