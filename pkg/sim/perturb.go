package sim

import (
	"bytes"
	"encoding/json"
	"math/big"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// slot is one value of an arguments object that a wrong argument can change.
type slot struct {
	get func() any
	set func(any)
}

// perturb changes one value of args, a JSON object: see Options.WrongArgument. It returns
// false when nothing in args can be changed (no values, or only nulls, empty arrays and
// objects).
func perturb(args string, rng *rand.Rand) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(args))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return args, false
	}
	var slots []slot
	var walk func(get func() any, set func(any))
	walk = func(get func() any, set func(any)) {
		switch x := get().(type) {
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				walk(func() any { return x[k] }, func(v any) { x[k] = v })
			}
		case []any:
			if len(x) > 0 {
				slots = append(slots, slot{get, set})
			}
			for i := range x {
				walk(func() any { return x[i] }, func(v any) { x[i] = v })
			}
		case nil:
		default:
			slots = append(slots, slot{get, set})
		}
	}
	walk(func() any { return root }, func(v any) { root = v })
	if len(slots) == 0 {
		return args, false
	}
	sl := slots[rng.IntN(len(slots))]
	sl.set(wrongValue(sl.get()))
	out, err := jsonfast.Marshal(root)
	if err != nil {
		return args, false
	}
	return string(out), true
}

// wrongValue is a plausible wrong value in place of v (never v itself).
func wrongValue(v any) any {
	switch x := v.(type) {
	case json.Number:
		return json.Number(plusOne(string(x)))
	case string:
		if _, err := strconv.ParseInt(x, 10, 64); err == nil {
			return plusOne(x)
		}
		if x == "" {
			return "x"
		}
		r, size := utf8.DecodeLastRuneInString(x)
		return x[:len(x)-size] + string(nextRune(r))
	case bool:
		return !x
	case []any:
		rev := slices.Clone(x)
		slices.Reverse(rev)
		if !reflect.DeepEqual(rev, x) {
			return rev
		}
		return x[:len(x)-1]
	}
	return v
}

// plusOne adds one to a JSON number, exactly for integers of any size.
func plusOne(n string) string {
	if !strings.ContainsAny(n, ".eE") {
		if b, ok := new(big.Int).SetString(n, 10); ok {
			return b.Add(b, big.NewInt(1)).String()
		}
	}
	f, err := strconv.ParseFloat(n, 64)
	if err != nil {
		return "1"
	}
	return strconv.FormatFloat(f+1, 'g', -1, 64)
}

// nextRune changes a letter or digit to the next one (z to a, 9 to 0), anything else to "x".
func nextRune(r rune) rune {
	switch {
	case r >= 'a' && r < 'z', r >= 'A' && r < 'Z', r >= '0' && r < '9':
		return r + 1
	case r == 'z':
		return 'a'
	case r == 'Z':
		return 'A'
	case r == '9':
		return '0'
	case r == 'x':
		return 'y'
	}
	return 'x'
}

// malformed cuts arguments to half their length (at least one byte): a proper prefix of a
// JSON object is never valid JSON.
func malformed(args string) string {
	args = string(bytes.TrimSpace([]byte(args)))
	if args == "" {
		return "{"
	}
	n := max(len(args)/2, 1)
	for n > 1 && !utf8.RuneStart(args[n]) {
		n--
	}
	return args[:n]
}
