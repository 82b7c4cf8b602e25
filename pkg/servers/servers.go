// Package servers is the registry of rollout's built-in resource servers: New starts one by
// name, Names lists them. The registry is the explicit list below; it registers:
//
//   - counter: a stateful counter with big integers and a bounded history (package counter)
//   - extraction: multi-step data extraction from simulated regional databases, with its task
//     generator (package extraction)
//   - workflow: a multi-step workflow (discovery, configuration, assembly), with its task
//     generator (package workflow)
//   - example_multi_step, example_session_state_mgmt, example_single_tool_call: Go ports of
//     NVIDIA NeMo Gym's three example resource servers (package nemogym)
//
// Each server is an http.Handler speaking the NeMo Gym resource-server protocol, built by the
// framework in package gym; its sessions' state lives in a store.Store (package store).
package servers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/pkg/servers/counter"
	"github.com/rollout-dev/rollout/pkg/servers/extraction"
	"github.com/rollout-dev/rollout/pkg/servers/gym"
	"github.com/rollout-dev/rollout/pkg/servers/nemogym"
	"github.com/rollout-dev/rollout/pkg/servers/workflow"
)

// builtins is the registry.
var builtins = []gym.Builtin{
	counter.Builtin,
	extraction.Builtin,
	workflow.Builtin,
	nemogym.MultiStep,
	nemogym.SessionStateMgmt,
	nemogym.SingleToolCall,
}

// Names lists the built-in resource servers, sorted.
func Names() []string {
	names := make([]string, 0, len(builtins))
	for _, b := range builtins {
		names = append(names, b.Name)
	}
	sort.Strings(names)
	return names
}

// Options configure a built-in resource server.
type Options = gym.Options

// Server is one built-in resource server, an http.Handler.
type Server = gym.Server

// New returns the named built-in resource server. Each call returns an independent server: a
// new in-memory session store and cookie key unless opts.Store is shared.
func New(name string, opts Options) (*Server, error) {
	for _, b := range builtins {
		if b.Name != name {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv, err := gym.New(ctx, b, opts)
		if err != nil {
			return nil, fmt.Errorf("servers: %w", err)
		}
		return srv, nil
	}
	return nil, fmt.Errorf("servers: unknown resource server %q (built-in: %s)", name, strings.Join(Names(), ", "))
}
