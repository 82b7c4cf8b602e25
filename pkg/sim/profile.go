package sim

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// profiles are named sets of knobs, a starting point that single knobs override.
//
//   - none: no latency, no errors: the simulator plays every plan perfectly (the oracle).
//   - realistic: a hosted model under moderate load: 300 ms ± 100 ms a call; per round, a 3%
//     chance of a wrong argument, 2% of a skipped step, 2% of answering too early, 1% of a
//     malformed tool call; per request, 2% 429s (Retry-After 1 s) and 1% 500s. Over a
//     five-round task that leaves about two rollouts in three flawless. These figures are
//     knobs chosen to exercise every failure path, not measurements of any model.
var profiles = map[string]Options{
	"none": {},
	"realistic": {
		Latency:           Latency{Dist: DistNormal, Mean: 300 * time.Millisecond, Stddev: 100 * time.Millisecond},
		WrongArgument:     0.03,
		SkipStep:          0.02,
		PrematureAnswer:   0.02,
		MalformedToolCall: 0.01,
		HTTP429:           0.02,
		HTTP500:           0.01,
		RetryAfter:        time.Second,
	},
}

// ProfileNames lists the named profiles, sorted.
func ProfileNames() []string {
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Profile returns the options of a named profile ("" is "none").
func Profile(name string) (Options, error) {
	if name == "" {
		name = "none"
	}
	o, ok := profiles[name]
	if !ok {
		return Options{}, fmt.Errorf("sim: unknown profile %q (profiles: %s)", name, strings.Join(ProfileNames(), ", "))
	}
	return o, nil
}
