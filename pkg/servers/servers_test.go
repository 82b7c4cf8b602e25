package servers

import (
	"slices"
	"sort"
	"strings"
	"testing"
)

func TestNewAndNames(t *testing.T) {
	names := Names()
	want := []string{"example_multi_step", "example_session_state_mgmt", "example_single_tool_call"}
	if !sort.StringsAreSorted(names) {
		t.Errorf("Names() = %v, not sorted", names)
	}
	for _, w := range want {
		if !slices.Contains(names, w) {
			t.Errorf("Names() = %v, without %s", names, w)
		}
	}
	for _, n := range names {
		h, err := New(n, Options{})
		if err != nil || h == nil {
			t.Fatalf("New(%q) = %v, %v", n, h, err)
		}
		if err := h.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	_, err := New("example_nope", Options{})
	if err == nil {
		t.Fatal("New(unknown) succeeded")
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("error %q does not list %s", err, n)
		}
	}
}
