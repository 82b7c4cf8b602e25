package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// Arguments from a tool's JSON Schema, for conversations without a plan. The subset understood:
// type (a name or a list of names), properties, required, enum, const, items, minItems,
// maxItems, uniqueItems, minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers),
// minLength, maxLength, format (date, date-time, email, uri, uuid), anyOf, oneOf, allOf (merged).
// Required properties are always present, the others half of the time.

// maxSchemaDepth stops runaway recursion (a schema can nest without end via anyOf).
const maxSchemaDepth = 12

// schemaArguments makes arguments, a JSON object, for a tool's parameters schema.
func schemaArguments(params json.RawMessage, rng *rand.Rand) string {
	var schema any = map[string]any{"type": "object"}
	if len(bytes.TrimSpace(params)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(params))
		dec.UseNumber()
		var s any
		if dec.Decode(&s) == nil {
			if m, ok := s.(map[string]any); ok {
				schema = m
			}
		}
	}
	v := genValue(schema, rng, 0)
	if _, ok := v.(map[string]any); !ok {
		// Arguments are an object whatever the schema says.
		v = map[string]any{}
	}
	out, err := jsonfast.Marshal(v)
	if err != nil {
		return "{}"
	}
	return string(out)
}

func genValue(schema any, rng *rand.Rand, depth int) any {
	s, ok := schema.(map[string]any)
	if !ok || depth > maxSchemaDepth {
		if depth > maxSchemaDepth {
			return nil
		}
		return pick(rng, words)
	}
	if c, ok := s["const"]; ok {
		return c
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[rng.IntN(len(e))]
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[k].([]any); ok && len(alts) > 0 {
			var nonNull []any
			for _, a := range alts {
				if m, ok := a.(map[string]any); !ok || m["type"] != "null" {
					nonNull = append(nonNull, a)
				}
			}
			if len(nonNull) > 0 {
				alts = nonNull
			}
			return genValue(withoutKey(s, k, alts[rng.IntN(len(alts))]), rng, depth+1)
		}
	}
	if all, ok := s["allOf"].([]any); ok && len(all) > 0 {
		merged := withoutKey(s, "allOf", nil)
		for _, a := range all {
			mergeSchema(merged, a)
		}
		return genValue(merged, rng, depth+1)
	}
	switch schemaType(s, rng) {
	case "object":
		return genObject(s, rng, depth)
	case "array":
		return genArray(s, rng, depth)
	case "integer":
		lo, hi := numRange(s, true)
		return int64(lo) + rng.Int64N(int64(hi-lo)+1)
	case "number":
		lo, hi := numRange(s, false)
		x := math.Round((lo+rng.Float64()*(hi-lo))*100) / 100
		return min(max(x, lo), hi)
	case "boolean":
		return rng.IntN(2) == 0
	case "null":
		return nil
	}
	return genString(s, rng)
}

// withoutKey copies s without key, merged with extra (a sub-schema) when it is an object.
func withoutKey(s map[string]any, key string, extra any) map[string]any {
	out := make(map[string]any, len(s))
	for k, v := range s {
		if k != key {
			out[k] = v
		}
	}
	mergeSchema(out, extra)
	return out
}

// mergeSchema merges sub into s: properties and required are united, other keys overwritten.
func mergeSchema(s map[string]any, sub any) {
	m, ok := sub.(map[string]any)
	if !ok {
		return
	}
	for k, v := range m {
		switch k {
		case "properties":
			props, _ := s[k].(map[string]any)
			np := map[string]any{}
			for pk, pv := range props {
				np[pk] = pv
			}
			if vm, ok := v.(map[string]any); ok {
				for pk, pv := range vm {
					np[pk] = pv
				}
			}
			s[k] = np
		case "required":
			req, _ := s[k].([]any)
			add, _ := v.([]any)
			s[k] = append(append([]any(nil), req...), add...)
		default:
			s[k] = v
		}
	}
}

// schemaType is the type to generate: the schema's type (one of a list, preferring non-null),
// else guessed from its keywords.
func schemaType(s map[string]any, rng *rand.Rand) string {
	switch t := s["type"].(type) {
	case string:
		return t
	case []any:
		var names []string
		for _, x := range t {
			if n, ok := x.(string); ok && n != "null" {
				names = append(names, n)
			}
		}
		if len(names) > 0 {
			return names[rng.IntN(len(names))]
		}
		if len(t) > 0 {
			return "null"
		}
	}
	switch {
	case s["properties"] != nil || s["required"] != nil:
		return "object"
	case s["items"] != nil:
		return "array"
	case s["minimum"] != nil || s["maximum"] != nil:
		return "number"
	}
	return "string"
}

func genObject(s map[string]any, rng *rand.Rand, depth int) any {
	props, _ := s["properties"].(map[string]any)
	required := map[string]bool{}
	if req, ok := s["required"].([]any); ok {
		for _, r := range req {
			if name, ok := r.(string); ok {
				required[name] = true
			}
		}
	}
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	for k := range required {
		if _, ok := props[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := map[string]any{}
	for _, k := range keys {
		if !required[k] && rng.IntN(2) == 0 {
			continue
		}
		out[k] = genValue(props[k], rng, depth+1)
	}
	return out
}

func genArray(s map[string]any, rng *rand.Rand, depth int) any {
	lo, hi := 1, 0
	if n, ok := intOf(s["minItems"]); ok {
		lo = int(max(n, 0))
	}
	if n, ok := intOf(s["maxItems"]); ok {
		hi = int(max(n, 0))
		lo = min(lo, hi)
	} else {
		hi = lo + 2
	}
	n := lo + rng.IntN(hi-lo+1)
	items := s["items"]
	unique, _ := s["uniqueItems"].(bool)
	out := make([]any, 0, n)
	seen := map[string]bool{}
	for tries := 0; len(out) < n && tries < 5*n+5; tries++ {
		v := genValue(items, rng, depth+1)
		if unique {
			b, _ := json.Marshal(v)
			if seen[string(b)] {
				continue
			}
			seen[string(b)] = true
		}
		out = append(out, v)
	}
	return out
}

// numRange is the inclusive range of a number or integer: minimum/maximum (an exclusive bound
// moved in by one for integers, by 0.01 for numbers, which are generated with two decimals), by
// default 0 to 100, or 100 wide next to the one bound given; kept within ±1e15.
func numRange(s map[string]any, integer bool) (lo, hi float64) {
	step := 0.01
	if integer {
		step = 1
	}
	lo, hasLo := floatOf(s["minimum"])
	if x, ok := floatOf(s["exclusiveMinimum"]); ok && (!hasLo || x+step > lo) {
		lo, hasLo = x+step, true
	}
	hi, hasHi := floatOf(s["maximum"])
	if x, ok := floatOf(s["exclusiveMaximum"]); ok && (!hasHi || x-step < hi) {
		hi, hasHi = x-step, true
	}
	switch {
	case hasLo && hasHi:
	case hasLo:
		hi = lo + 100
	case hasHi:
		lo = hi - 100
		if hi >= 0 && lo < 0 {
			lo = 0
		}
	default:
		lo, hi = 0, 100
	}
	const limit = 1e15
	lo, hi = min(max(lo, -limit), limit), min(max(hi, -limit), limit)
	if integer {
		lo, hi = math.Ceil(lo), math.Floor(hi)
	}
	if hi < lo {
		// An empty range (a contradictory schema): its lower end.
		hi = lo
	}
	return lo, hi
}

var words = []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"}

func pick(rng *rand.Rand, list []string) string { return list[rng.IntN(len(list))] }

func genString(s map[string]any, rng *rand.Rand) string {
	var v string
	switch s["format"] {
	case "date":
		v = fmt.Sprintf("2024-%02d-%02d", 1+rng.IntN(12), 1+rng.IntN(28))
	case "date-time":
		v = fmt.Sprintf("2024-%02d-%02dT%02d:%02d:00Z", 1+rng.IntN(12), 1+rng.IntN(28), rng.IntN(24), rng.IntN(60))
	case "email":
		v = fmt.Sprintf("%s%d@example.com", pick(rng, words), rng.IntN(100))
	case "uri", "url":
		v = "https://example.com/" + pick(rng, words)
	case "uuid":
		v = fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", rng.Uint32(), rng.IntN(1<<16), rng.IntN(1<<12), rng.IntN(1<<12), rng.Int64N(1<<48))
	default:
		v = pick(rng, words)
		if rng.IntN(2) == 0 {
			v += " " + pick(rng, words)
		}
	}
	if n, ok := intOf(s["minLength"]); ok && int64(len(v)) < n {
		v += strings.Repeat("x", int(n)-len(v))
	}
	if n, ok := intOf(s["maxLength"]); ok && n >= 0 && int64(len(v)) > n {
		v = v[:n]
	}
	return v
}

func floatOf(v any) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case float64:
		return x, true
	}
	return 0, false
}

func intOf(v any) (int64, bool) {
	switch x := v.(type) {
	case json.Number:
		n, err := strconv.ParseInt(string(x), 10, 64)
		return n, err == nil
	case float64:
		return int64(x), x == math.Trunc(x)
	}
	return 0, false
}
