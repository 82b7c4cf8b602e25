package verify_test

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/rollout-dev/rollout/pkg/verify"
)

// FuzzVerifyParse reads arbitrary bytes as a /verify answer. It must never panic, and it
// returns a reward only for one JSON object (nothing after it but white space) whose single
// "reward" member is a finite number, equal to that number; every component is finite;
// anything else is a *verify.Error. The seed corpus is in testdata/fuzz/FuzzVerifyParse.
func FuzzVerifyParse(f *testing.F) {
	f.Add([]byte(`{"reward":1.0,"accuracy":true}`))
	f.Fuzz(func(t *testing.T, answer []byte) {
		r, err := verify.Parse(answer, []string{"id", "expected_count"})
		if err != nil {
			if r != nil || !verify.IsError(err) {
				t.Fatalf("result %v with error %T %v", r, err, err)
			}
			return
		}
		// Accepted: it must be exactly one JSON object with a finite numeric reward.
		dec := json.NewDecoder(bytes.NewReader(answer))
		dec.UseNumber()
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			t.Fatalf("reward %v from an answer that is not a JSON object: %q", r.Reward, answer)
		}
		if _, err := dec.Token(); err == nil || !json.Valid(answer) {
			t.Fatalf("reward %v from an answer with trailing data: %q", r.Reward, answer)
		}
		num, ok := obj["reward"].(json.Number)
		if !ok {
			t.Fatalf("reward %v from an answer whose reward is %T: %q", r.Reward, obj["reward"], answer)
		}
		f, err := num.Float64()
		if err != nil || f != r.Reward || math.IsNaN(r.Reward) || math.IsInf(r.Reward, 0) {
			t.Fatalf("reward %v, the answer says %s: %q", r.Reward, num, answer)
		}
		for k, v := range r.Components {
			if math.IsNaN(v) || math.IsInf(v, 0) || k == "reward" || k == "id" || k == "expected_count" {
				t.Fatalf("component %s = %v: %q", k, v, answer)
			}
		}
		if !bytes.Equal(r.Answer, answer) {
			t.Fatal("Answer is not the answer as sent")
		}
	})
}
