package main

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/internal/redact"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/runner"
	"github.com/rollout-dev/rollout/pkg/servers"
	"github.com/rollout-dev/rollout/pkg/toolclient"
)

// serverSetup is how buildServers makes resource-server clients.
type serverSetup struct {
	store       string        // session store of the builtin: servers
	ttl         time.Duration // their session TTL
	toolTimeout time.Duration
	// maxToolResult caps one tool call's answer (--max-tool-result).
	maxToolResult int64
	transport     http.RoundTripper
	policy        retry.Policy
	endSessions   bool // POST /end_session to every server, not only builtin: ones
	// maxConns caps the connections of each builtin: server (<= 0: localserve's default).
	maxConns int
}

// buildServers turns --server flags (URL, NAME=URL, builtin:NAME, NAME=builtin:NAME) into the
// run's routes, starting the built-in servers named; stops shuts those down (also on error).
func buildServers(ctx context.Context, specs []string, c serverSetup) (routes runner.Servers, stops []func(), err error) {
	for _, s := range specs {
		// name routes rows by agent_ref.name; label names the server in
		// the records' agent column.
		name, url := "", serverURL(s)
		if url != s {
			name = strings.TrimSuffix(s, "="+url)
		}
		builtin := strings.HasPrefix(url, "builtin:")
		label := name
		if bname, ok := strings.CutPrefix(url, "builtin:"); ok {
			u, stop, err := startBuiltin(ctx, bname, c.store, c.ttl, c.maxConns)
			if err != nil {
				return routes, stops, badUsage("--server %s: %v", s, err)
			}
			stops = append(stops, stop)
			url = u
			if label == "" {
				label = bname
			}
		}
		if label == "" {
			label = redact.URL(url) // the records' agent column: no credentials
		}
		srv, err := toolclient.New(label, url, c.transport)
		if err != nil {
			if !strings.Contains(url, ":") && slices.Contains(servers.Names(), url) {
				return routes, stops, badUsage("--server %s: want an http:// or https:// URL; did you mean builtin:%s (rollout's built-in %s server)?", s, url, url)
			}
			return routes, stops, badUsage("--server: %v", err)
		}
		srv.Retry = c.policy
		srv.EndSession = builtin || c.endSessions
		srv.CallTimeout = c.toolTimeout
		srv.MaxToolResultBytes = c.maxToolResult
		if name == "" {
			if routes.Default != nil {
				return routes, stops, badUsage("--server: two servers for every row (%s, %s); name them with NAME=URL", routes.Default.Name, s)
			}
			routes.Default = srv
			continue
		}
		if routes.ByName == nil {
			routes.ByName = map[string]*toolclient.Server{}
		}
		if _, dup := routes.ByName[name]; dup {
			return routes, stops, badUsage("--server: %q given twice", name)
		}
		routes.ByName[name] = srv
	}
	return routes, stops, nil
}
