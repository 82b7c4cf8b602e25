package servers

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"

	"github.com/rollout-dev/rollout/pkg/servers/store"
)

func init() {
	register(builtin{name: "example_multi_step", class: "ExampleMultiStepResourcesServer", make: newMultiStep})
}

// multiStep is example_multi_step: the model looks up the value of every relevant synonym with
// get_synonym_value and reports the list with extract_synonym_values. Stateless.
//
// verify, as resources_servers/example_multi_step/app.py computes it:
//
//	actual   = json.loads(arguments)["synonym_values"] of the LAST function_call named
//	           extract_synonym_values in response.output, or [] when there is none
//	accuracy = expected_synonym_values == actual            (Python list equality)
//	set_overlap = len(set(actual) & set(expected)) / len(expected)
//	original_term_minefield_hit = minefield_label in actual or minefield_label_value in actual
//	order_instruction_following_failure = not accuracy and set_overlap == 1.0
//	reward   = float(accuracy)
//	parsed_synonym_values = actual, validated as List[int]
//
// What the Python raises becomes a 500 here too: arguments that are not JSON (JSONDecodeError),
// arguments without "synonym_values" (KeyError), an empty expected list (ZeroDivisionError),
// values that are not a list of ints (TypeError / ValidationError).
type multiStep struct {
	name string
}

func newMultiStep(name string, _ store.Store) ResourceServer { return &multiStep{name: name} }

func (m *multiStep) tool(name string) (ToolFunc, bool) {
	switch name {
	case "get_synonym_value":
		return m.getSynonymValue, true
	case "extract_synonym_values":
		return m.extractSynonymValues, true
	}
	return nil, false
}

// synonymValue is the value of a synonym: the sum of its characters' code points
// (sum(map(ord, synonym))), e.g. "Blazing" → 711, "Warm" → 407.
func synonymValue(s string) int64 {
	var sum int64
	for _, r := range s {
		sum += int64(r)
	}
	return sum
}

func (m *multiStep) getSynonymValue(_ context.Context, _ string, body []byte) ([]Field, error) {
	args, err := ParseBody(body)
	if err != nil {
		return nil, err
	}
	var errs ValidationErrors
	var synonym string
	if raw, ok := Required(args, "synonym", []any{"body"}, &errs); ok {
		synonym, _ = LaxString(raw, []any{"body", "synonym"}, &errs)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return []Field{{"synonym_value", synonymValue(synonym)}}, nil
}

func (m *multiStep) extractSynonymValues(_ context.Context, _ string, body []byte) ([]Field, error) {
	args, err := ParseBody(body)
	if err != nil {
		return nil, err
	}
	var errs ValidationErrors
	if raw, ok := Required(args, "synonym_values", []any{"body"}, &errs); ok {
		LaxIntList(raw, []any{"body", "synonym_values"}, &errs)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return []Field{{"success", true}}, nil
}

func (m *multiStep) seedSession(context.Context, string, *Object) error { return nil }

func (m *multiStep) verify(_ context.Context, _ SessionState, req *Object, output []OutputItem, errs *ValidationErrors) ([]Field, error) {
	loc := []any{"body"}
	if raw, ok := Required(req, "id", loc, errs); ok {
		LaxInt(raw, At(loc, "id"), errs)
	}
	var expected []*big.Int
	if raw, ok := Required(req, "expected_synonym_values", loc, errs); ok {
		expected, _ = LaxIntList(raw, At(loc, "expected_synonym_values"), errs)
	}
	if raw, ok := Required(req, "expected_synonyms", loc, errs); ok {
		LaxStringList(raw, At(loc, "expected_synonyms"), errs)
	}
	var label string
	if raw, ok := Required(req, "minefield_label", loc, errs); ok {
		label, _ = LaxString(raw, At(loc, "minefield_label"), errs)
	}
	var labelValue *big.Int
	if raw, ok := Required(req, "minefield_label_value", loc, errs); ok {
		labelValue, _ = LaxInt(raw, At(loc, "minefield_label_value"), errs)
	}
	if len(*errs) > 0 {
		return nil, nil
	}

	var actual any = []any{}
	for i := len(output) - 1; i >= 0; i-- {
		item := output[i]
		if item.Type != "function_call" || normalizeToolName(item.Name, m.name) != "extract_synonym_values" {
			continue
		}
		args, err := DecodePython([]byte(item.Arguments))
		if err != nil {
			return nil, &PyError{"JSONDecodeError", JSONErrorMessage([]byte(item.Arguments), err)}
		}
		obj, ok := args.(map[string]any)
		if !ok {
			return nil, subscriptError(args)
		}
		if actual, ok = obj["synonym_values"]; !ok {
			return nil, &PyError{"KeyError", "synonym_values"}
		}
		break
	}

	// set(actual): only an iterable of hashable values makes a set.
	list, isList := actual.([]any)
	switch a := actual.(type) {
	case []any:
		for _, v := range a {
			if !PyHashable(v) {
				return nil, &PyError{"TypeError", fmt.Sprintf("unhashable type: '%s'", PyTypeName(v))}
			}
		}
	case string, map[string]any:
	default:
		return nil, &PyError{"TypeError", fmt.Sprintf("'%s' object is not iterable", PyTypeName(actual))}
	}
	if len(expected) == 0 {
		return nil, &PyError{"ZeroDivisionError", "division by zero"}
	}
	if !isList {
		// A str or dict gets through set(), `in` and the arithmetic (or fails in `in`), but
		// never through the response model's List[int].
		if s, isStr := actual.(string); isStr && !strings.Contains(s, label) {
			return nil, &PyError{"TypeError", "'in <string>' requires string as left operand, not int"}
		}
		return nil, responseValidationError("parsed_synonym_values", "Input should be a valid list")
	}

	expectedPy := IntsToPy(expected)
	accuracy := PyEqual(expectedPy, list)
	overlap := 0
	for i, e := range expectedPy {
		if containsPy(expectedPy[:i], e) {
			continue // a set holds each expected value once
		}
		if containsPy(list, e) {
			overlap++
		}
	}
	setOverlap := float64(overlap) / float64(len(expected))
	minefieldHit := containsPy(list, label) || containsPy(list, json.Number(labelValue.String()))

	parsed := make([]*big.Int, len(list))
	for i, a := range list {
		n, msg := PyLaxInt(a)
		if msg != "" {
			return nil, responseValidationError(fmt.Sprintf("parsed_synonym_values.%d", i), msg)
		}
		parsed[i] = n
	}

	reward := 0.0
	if accuracy {
		reward = 1.0
	}
	return []Field{
		{"reward", PyFloat(reward)},
		{"parsed_synonym_values", parsed},
		{"accuracy", accuracy},
		{"set_overlap", PyFloat(setOverlap)},
		{"original_term_minefield_hit", minefieldHit},
		{"order_instruction_following_failure", !accuracy && setOverlap == 1.0},
	}, nil
}

// containsPy is Python's `v in list`.
func containsPy(list []any, v any) bool {
	for _, a := range list {
		if PyEqual(a, v) {
			return true
		}
	}
	return false
}

// subscriptError is what Python raises for value["synonym_values"] when value is not a dict.
func subscriptError(v any) error {
	switch v.(type) {
	case []any:
		return &PyError{"TypeError", "list indices must be integers or slices, not str"}
	case string:
		return &PyError{"TypeError", "string indices must be integers, not 'str'"}
	}
	return &PyError{"TypeError", fmt.Sprintf("'%s' object is not subscriptable", PyTypeName(v))}
}

// responseValidationError is the pydantic ValidationError raised when the verify response model
// rejects a value the verify function computed.
func responseValidationError(loc, msg string) error {
	return &PyError{"ValidationError", "1 validation error for ExampleMultiStepVerifyResponse\n" + loc + "\n  " + msg}
}

// normalizeToolName strips this server's MCP namespace ("mcp__<server>__") from a tool-call name,
// as NeMo Gym's normalize_tool_name does for servers exposed over MCP.
func normalizeToolName(name, server string) string {
	if !strings.HasPrefix(name, "mcp__") {
		return name
	}
	return strings.TrimPrefix(name, "mcp__"+server+"__")
}
