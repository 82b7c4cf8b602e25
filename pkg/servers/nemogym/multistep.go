package nemogym

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"

	"github.com/rollout-dev/rollout/pkg/servers/gym"
	"github.com/rollout-dev/rollout/pkg/servers/store"
)

// MultiStep is NeMo Gym's example_multi_step server (see multiStep).
var MultiStep = gym.Builtin{Name: "example_multi_step", Class: "ExampleMultiStepResourcesServer", New: newMultiStep}

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

func newMultiStep(name string, _ store.Store) gym.ResourceServer { return &multiStep{name: name} }

func (m *multiStep) Tool(name string) (gym.ToolFunc, bool) {
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

func (m *multiStep) getSynonymValue(_ context.Context, _ string, body []byte) ([]gym.Field, error) {
	synonym, err := gym.Arg(body, "synonym", gym.LaxString)
	if err != nil {
		return nil, err
	}
	return []gym.Field{{Key: "synonym_value", Value: synonymValue(synonym)}}, nil
}

func (m *multiStep) extractSynonymValues(_ context.Context, _ string, body []byte) ([]gym.Field, error) {
	if _, err := gym.Arg(body, "synonym_values", gym.LaxIntList); err != nil {
		return nil, err
	}
	return []gym.Field{{Key: "success", Value: true}}, nil
}

func (m *multiStep) SeedSession(context.Context, string, *gym.Object) error { return nil }

func (m *multiStep) Verify(_ context.Context, _ gym.SessionState, req *gym.Object, output []gym.OutputItem, errs *gym.ValidationErrors) ([]gym.Field, error) {
	loc := []any{"body"}
	gym.RequiredAs(req, "id", loc, errs, gym.LaxInt)
	expected := gym.RequiredAs(req, "expected_synonym_values", loc, errs, gym.LaxIntList)
	gym.RequiredAs(req, "expected_synonyms", loc, errs, gym.LaxStringList)
	label := gym.RequiredAs(req, "minefield_label", loc, errs, gym.LaxString)
	labelValue := gym.RequiredAs(req, "minefield_label_value", loc, errs, gym.LaxInt)
	if len(*errs) > 0 {
		return nil, nil
	}

	var actual any = []any{}
	for i := len(output) - 1; i >= 0; i-- {
		item := output[i]
		if item.Type != "function_call" || gym.NormalizeToolName(item.Name, m.name) != "extract_synonym_values" {
			continue
		}
		args, err := gym.DecodePython([]byte(item.Arguments))
		if err != nil {
			return nil, &gym.PyError{Class: "JSONDecodeError", Msg: gym.JSONErrorMessage([]byte(item.Arguments), err)}
		}
		obj, ok := args.(map[string]any)
		if !ok {
			return nil, subscriptError(args)
		}
		if actual, ok = obj["synonym_values"]; !ok {
			return nil, &gym.PyError{Class: "KeyError", Msg: "synonym_values"}
		}
		break
	}

	// set(actual): only an iterable of hashable values makes a set.
	list, isList := actual.([]any)
	switch a := actual.(type) {
	case []any:
		for _, v := range a {
			if !gym.PyHashable(v) {
				return nil, &gym.PyError{Class: "TypeError", Msg: fmt.Sprintf("unhashable type: '%s'", gym.PyTypeName(v))}
			}
		}
	case string, map[string]any:
	default:
		return nil, &gym.PyError{Class: "TypeError", Msg: fmt.Sprintf("'%s' object is not iterable", gym.PyTypeName(actual))}
	}
	if len(expected) == 0 {
		return nil, &gym.PyError{Class: "ZeroDivisionError", Msg: "division by zero"}
	}
	if !isList {
		// A str or dict gets through set(), `in` and the arithmetic (or fails in `in`), but
		// never through the response model's List[int].
		if s, isStr := actual.(string); isStr && !strings.Contains(s, label) {
			return nil, &gym.PyError{Class: "TypeError", Msg: "'in <string>' requires string as left operand, not int"}
		}
		return nil, responseValidationError("parsed_synonym_values", "Input should be a valid list")
	}

	expectedPy := gym.IntsToPy(expected)
	accuracy := gym.PyEqual(expectedPy, list)
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
		n, msg := gym.PyLaxInt(a)
		if msg != "" {
			return nil, responseValidationError(fmt.Sprintf("parsed_synonym_values.%d", i), msg)
		}
		parsed[i] = n
	}

	reward := 0.0
	if accuracy {
		reward = 1.0
	}
	return []gym.Field{
		{Key: "reward", Value: gym.PyFloat(reward)},
		{Key: "parsed_synonym_values", Value: parsed},
		{Key: "accuracy", Value: accuracy},
		{Key: "set_overlap", Value: gym.PyFloat(setOverlap)},
		{Key: "original_term_minefield_hit", Value: minefieldHit},
		{Key: "order_instruction_following_failure", Value: !accuracy && setOverlap == 1.0},
	}, nil
}

// containsPy is Python's `v in list`.
func containsPy(list []any, v any) bool {
	for _, a := range list {
		if gym.PyEqual(a, v) {
			return true
		}
	}
	return false
}

// subscriptError is what Python raises for value["synonym_values"] when value is not a dict.
func subscriptError(v any) error {
	switch v.(type) {
	case []any:
		return &gym.PyError{Class: "TypeError", Msg: "list indices must be integers or slices, not str"}
	case string:
		return &gym.PyError{Class: "TypeError", Msg: "string indices must be integers, not 'str'"}
	}
	return &gym.PyError{Class: "TypeError", Msg: fmt.Sprintf("'%s' object is not subscriptable", gym.PyTypeName(v))}
}

// responseValidationError is the pydantic ValidationError raised when the verify response model
// rejects a value the verify function computed.
func responseValidationError(loc, msg string) error {
	return &gym.PyError{Class: "ValidationError", Msg: "1 validation error for ExampleMultiStepVerifyResponse\n" + loc + "\n  " + msg}
}
