package agent

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/rollout-dev/rollout/internal/redact"
)

// Endpoint is a model base URL taken apart: Base (without its query) is what the client joins
// /chat/completions to, and Query is sent with every request (QueryTransport), so that a base
// URL such as https://host/openai/deployments/d?api-version=2024-10-21 works.
type Endpoint struct {
	Base  string
	Query url.Values
	// Secrets are the URL's password and query values: an endpoint or an error may echo them.
	Secrets []string
}

// ParseEndpoint splits a model base URL into its base and its query.
func ParseEndpoint(raw string) (Endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Endpoint{}, err
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return Endpoint{}, fmt.Errorf("%s: not an http(s) URL", redact.URL(raw))
	}
	e := Endpoint{Query: u.Query(), Secrets: redact.URLSecrets(raw)}
	u.RawQuery, u.ForceQuery, u.Fragment = "", false, ""
	e.Base = strings.TrimRight(u.String(), "/")
	return e, nil
}

// QueryTransport sends every request through next with query's parameters added to its URL
// (those the request already has are kept).
func QueryTransport(next http.RoundTripper, query url.Values) http.RoundTripper {
	if len(query) == 0 {
		return next
	}
	return queryTransport{next: next, query: query}
}

type queryTransport struct {
	next  http.RoundTripper
	query url.Values
}

func (t queryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	for k, vs := range t.query {
		if _, ok := q[k]; !ok {
			q[k] = vs
		}
	}
	r := req.Clone(req.Context()) // a RoundTripper must not change the request it is given
	r.URL.RawQuery = q.Encode()
	return t.next.RoundTrip(r)
}
