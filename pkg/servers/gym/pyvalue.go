package gym

import (
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
)

// Python value semantics for values decoded by DecodePython (nil, bool, json.Number, string,
// []any, map[string]any), enough to compute what the Python verify functions compute.

// PyTypeName is the Python type name of v.
func PyTypeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case json.Number:
		if isPyFloat(x) {
			return "float"
		}
		return "int"
	case string:
		return "str"
	case []any:
		return "list"
	case map[string]any:
		return "dict"
	}
	return "object"
}

// isPyFloat reports whether json.loads makes a float (rather than an int) of n.
func isPyFloat(n json.Number) bool { return strings.ContainsAny(string(n), ".eE") }

// pyNumber is v as an exact rational when it is a Python number (bool, int or finite float).
func pyNumber(v any) (*big.Rat, bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return big.NewRat(1, 1), true
		}
		return new(big.Rat), true
	case json.Number:
		if !isPyFloat(x) {
			r, ok := new(big.Rat).SetString(string(x))
			return r, ok
		}
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil { // out of range: Python's float is ±inf, equal to no int
			return nil, false
		}
		r := new(big.Rat)
		if r.SetFloat64(f) == nil {
			return nil, false
		}
		return r, true
	}
	return nil, false
}

// PyEqual is Python's == for decoded JSON values.
func PyEqual(a, b any) bool {
	if ra, ok := pyNumber(a); ok {
		rb, ok := pyNumber(b)
		return ok && ra.Cmp(rb) == 0
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !PyEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !PyEqual(v, w) {
				return false
			}
		}
		return true
	}
	return false
}

// PyHashable reports whether v can be a member of a Python set.
func PyHashable(v any) bool {
	switch v.(type) {
	case []any, map[string]any:
		return false
	}
	return true
}

// IntsToPy turns validated ints into values comparable with PyEqual.
func IntsToPy(ns []*big.Int) []any {
	out := make([]any, len(ns))
	for i, n := range ns {
		out[i] = json.Number(n.String())
	}
	return out
}

// PyLaxInt converts a Python value to int as a pydantic int field does in lax mode; the error
// message is pydantic's.
func PyLaxInt(v any) (*big.Int, string) {
	switch x := v.(type) {
	case bool:
		if x {
			return big.NewInt(1), ""
		}
		return big.NewInt(0), ""
	case json.Number:
		if n, ok := numberToInt(x); ok {
			return n, ""
		}
		if _, ok := pyNumber(x); !ok {
			return nil, "Input should be a finite number"
		}
		return nil, "Input should be a valid integer, got a number with a fractional part"
	case string:
		if n, ok := stringToInt(x); ok {
			return n, ""
		}
		return nil, "Input should be a valid integer, unable to parse string as an integer"
	}
	return nil, "Input should be a valid integer"
}
