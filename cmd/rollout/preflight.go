package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/internal/redact"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/runner"
)

// preflightTimeout bounds each request of the preflight.
const preflightTimeout = 10 * time.Second

// preflightModel checks, before a run writes anything, that base (--model-url without its
// query, which client sends with every request) is an OpenAI-compatible API that serves model:
// GET {base}/models answers a model list, and the list names model (when it names any). Its
// error is one line naming the flag, the URL and the cause.
//
// The URL's password and query values are not shown, and an endpoint that echoes the API key
// or them in its answer cannot make the error show them.
func preflightModel(ctx context.Context, client *http.Client, base, apiKey, model string, secrets []string) error {
	err := checkModel(ctx, client, base, apiKey, model)
	if err == nil || errors.Is(err, errInterruptedEarly) {
		return err
	}
	msg := err.Error()
	if r := redact.Replacer(secrets); r != nil {
		msg = r.Replace(msg)
	}
	if errors.As(err, new(transientError)) {
		return transientError{errors.New(msg)}
	}
	return badUsage("%s", msg)
}

// transientError is a failure that the same command may not meet later: an endpoint that is
// not up yet (unreachable, or answering 5xx or 429), an output directory locked by another
// run. It exits exitTransient, which a scheduler retries; exit 2 is kept for what a retry
// cannot change.
type transientError struct{ err error }

func (t transientError) Error() string { return t.err.Error() }
func (t transientError) Unwrap() error { return t.err }

// notUp is the transientError of an endpoint that is not up (yet).
func notUp(format string, args ...any) error {
	return transientError{fmt.Errorf(format, args...)}
}

// waitReady runs check until it passes, fails with an error that is not transient, or
// waitFor is over (0: once); it says on w, once, what it waits for. Between tries it waits
// 1s, doubling up to 10s.
func waitReady(ctx context.Context, w io.Writer, waitFor time.Duration, check func() error) error {
	deadline := time.Now().Add(waitFor)
	pause := time.Second
	said := false
	for {
		err := check()
		if err == nil || !errors.As(err, new(transientError)) || waitFor <= 0 {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return transientError{fmt.Errorf("not ready within --wait-ready %s: %w", waitFor, err)}
		}
		if !said {
			fmt.Fprintf(w, "rollout: waiting up to %s (--wait-ready) for the endpoints: %v\n", waitFor, err)
			said = true
		}
		t := time.NewTimer(min(pause, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return errInterruptedEarly
		case <-t.C:
		}
		pause = min(2*pause, 10*time.Second)
	}
}

func checkModel(ctx context.Context, client *http.Client, rawBase, apiKey, model string) error {
	u := strings.TrimRight(rawBase, "/") + "/models"
	base, shown := redact.URL(rawBase), redact.URL(u)
	body, resp, err := preflightGet(ctx, client, u, apiKey)
	u = shown
	if ctx.Err() != nil {
		return errInterruptedEarly
	}
	if err != nil {
		return notUp("--model-url %s: cannot reach the model endpoint: %v", base, err)
	}
	what := fmt.Sprintf("GET %s answered %s", u, resp.Status)
	switch {
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		return notUp("--model-url %s: %s%s: the endpoint is not ready", base, what, bodyMessage(resp, body))
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return badUsage("--model-url %s: %s%s: the endpoint wants an API key (set OPENAI_API_KEY)", base, what, bodyMessage(resp, body))
	case resp.StatusCode == http.StatusNotFound:
		return badUsage("--model-url %s: %s%s: no OpenAI-compatible API at this URL (its base usually ends in /v1)", base, what, bodyMessage(resp, body))
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return badUsage("--model-url %s: %s%s", base, what, bodyMessage(resp, body))
	}
	var list struct {
		Data *[]struct {
			ID      string `json:"id"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &list) != nil || list.Data == nil {
		return badUsage("--model-url %s: GET %s answered %s, not an OpenAI-compatible model list: is this the API's base URL (it usually ends in /v1)?", base, u, describeBody(resp, body))
	}
	var ids []string
	for _, m := range *list.Data {
		ids = append(ids, m.ID)
	}
	if len(ids) == 0 || slices.Contains(ids, model) {
		return nil
	}
	// llama.cpp's llama-server with one model (-m FILE) lists it by its file or --alias, and
	// answers a request for any model name with it.
	if d := *list.Data; len(d) == 1 && d[0].OwnedBy == "llamacpp" {
		return nil
	}
	msg := fmt.Sprintf("--model %s: %s does not serve it; it serves %s", model, base, listSome(ids, 5))
	if near := closest(model, ids); len(near) > 0 {
		msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(near, " or "))
	}
	return badUsage("%s", msg)
}

// preflightServers checks that every resource server answers HTTP (any status: NeMo Gym's
// servers answer 404 at their root).
func preflightServers(ctx context.Context, client *http.Client, routes runner.Servers) error {
	check := func(flagValue, base string) error {
		_, _, err := preflightGet(ctx, client, base, "")
		if ctx.Err() != nil {
			return errInterruptedEarly
		}
		if err != nil {
			return notUp("--server %s: cannot reach the resource server: %v", flagValue, err)
		}
		return nil
	}
	if routes.Default != nil {
		if err := check(redact.URL(routes.Default.Base()), routes.Default.Base()); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(routes.ByName)) {
		srv := routes.ByName[name]
		if err := check(name+"="+redact.URL(srv.Base()), srv.Base()); err != nil {
			return err
		}
	}
	return nil
}

// preflightGet GETs u and reads up to 1 MiB of its answer. Its error is the transport's cause
// ("dial tcp 127.0.0.1:9: connect: connection refused"), without Go's "Get URL:" wrapping.
func preflightGet(ctx context.Context, client *http.Client, u, apiKey string) ([]byte, *http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, preflightTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "application/json")
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s", preflightTimeout)
		}
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the answer: %v", err)
	}
	return body, resp, nil
}

var htmlTitle = regexp.MustCompile(`(?is)<title[^>]*>(.*?)</title>`)

// bodyMessage is ": " and the endpoint's own message in an error answer (OpenAI's
// {"error": {"message"}}, vLLM's {"message"}, FastAPI's {"detail"}, an HTML page's title), or "".
func bodyMessage(resp *http.Response, body []byte) string {
	var v struct {
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &v) == nil {
		var nested struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case v.Message != "":
			return ": " + record.Clip(v.Message, 300)
		case json.Unmarshal(v.Error, &nested) == nil && nested.Message != "":
			return ": " + record.Clip(nested.Message, 300)
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return ": " + record.Clip(s, 300)
		case json.Unmarshal(v.Detail, &s) == nil && s != "":
			return ": " + record.Clip(s, 300)
		}
		return ""
	}
	if d := describeBody(resp, body); d != "" {
		return " (" + d + ")"
	}
	return ""
}

// describeBody names what an answer that is not JSON is: "an HTML page "Welcome to nginx!"".
func describeBody(resp *http.Response, body []byte) string {
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if m := htmlTitle.FindSubmatch(body); ct == "text/html" || m != nil {
		if m != nil {
			return fmt.Sprintf("an HTML page %q", record.Clip(string(m[1]), 80))
		}
		return "an HTML page"
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return "an empty body"
	}
	return fmt.Sprintf("%s %q", cmp.Or(ct, "a body"), record.Clip(string(body), 80))
}

// listSome is "a, b, c" or "a, b, c and 7 more".
func listSome(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}
