package servers

import (
	"context"

	"github.com/rollout-dev/rollout/pkg/servers/store"
)

func init() {
	register(builtin{name: "example_single_tool_call", class: "SimpleWeatherResourcesServer", make: newWeather})
}

// weather is example_single_tool_call (formerly example_simple_weather): one tool, get_weather
// {city} → {"city": city, "weather_description": "The weather in <city> is cold."}; verify always
// answers reward 1.0. Stateless.
type weather struct{}

func newWeather(string, store.Store) resourceServer { return weather{} }

func (weather) tool(name string) (toolFunc, bool) {
	if name == "get_weather" {
		return getWeather, true
	}
	return nil, false
}

func getWeather(_ context.Context, _ string, body []byte) ([]field, error) {
	args, err := parseBodyObject(body)
	if err != nil {
		return nil, err
	}
	var errs validationErrors
	var city string
	if raw, ok := required(args, "city", []any{"body"}, &errs); ok {
		city, _ = laxString(raw, []any{"body", "city"}, &errs)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return []field{
		{"city", city},
		{"weather_description", "The weather in " + city + " is cold."},
	}, nil
}

func (weather) seedSession(context.Context, string, *object) error { return nil }

func (weather) verify(context.Context, sessionState, *object, []outputItem, *validationErrors) ([]field, error) {
	return []field{{"reward", pyFloat(1.0)}}, nil
}
