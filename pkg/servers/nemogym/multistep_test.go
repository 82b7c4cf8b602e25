package nemogym

import (
	"testing"

	"github.com/rollout-dev/rollout/pkg/servers/gym"
	"github.com/rollout-dev/rollout/pkg/servers/gym/gymtest"
)

func TestSynonymValue(t *testing.T) {
	for s, want := range map[string]int64{"Blazing": 711, "Warm": 407, "Hot": 299, "Arid": 384, "é": 233, "": 0} {
		if got := synonymValue(s); got != want {
			t.Errorf("synonymValue(%q) = %d, want %d", s, got, want)
		}
	}
	_, srv := gymtest.Start(t, MultiStep, gym.Options{})
	s := gymtest.NewSession(t, srv)
	if out := s.MustPost("/get_synonym_value", []byte(`{"synonym":"Blazing"}`)); string(out) != `{"synonym_value": 711}` {
		t.Errorf("get_synonym_value = %s", out)
	}
	if out := s.MustPost("/extract_synonym_values", []byte(`{"synonym_values":[711,407]}`)); string(out) != `{"success": true}` {
		t.Errorf("extract_synonym_values = %s", out)
	}
}
