package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A bad flag of `rollout-bench fleet` is exit 2 and one line that names it, before any case runs.
func TestFleetBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"fleet", "-cache", "lru"}, "-cache lru: want blocks or slots"},
		{[]string{"fleet", "-costs", "a100"}, "-costs a100: want h100 or tiny-cpu"},
		{[]string{"fleet", "-routes", "random"}, `unknown route "random"`},
		{[]string{"fleet", "-concurrency", "8,x"}, "-concurrency:"},
		{[]string{"fleet", "-limit", "many"}, "-limit"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want exit 2 and %q", tc.args, code, stderr.String(), stdout.String(), tc.want)
		}
	}
}
