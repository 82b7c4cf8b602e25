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

func newWeather(string, store.Store) ResourceServer { return weather{} }

func (weather) tool(name string) (ToolFunc, bool) {
	if name == "get_weather" {
		return getWeather, true
	}
	return nil, false
}

func getWeather(_ context.Context, _ string, body []byte) ([]Field, error) {
	args, err := ParseBody(body)
	if err != nil {
		return nil, err
	}
	var errs ValidationErrors
	var city string
	if raw, ok := Required(args, "city", []any{"body"}, &errs); ok {
		city, _ = LaxString(raw, []any{"body", "city"}, &errs)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return []Field{
		{"city", city},
		{"weather_description", "The weather in " + city + " is cold."},
	}, nil
}

func (weather) seedSession(context.Context, string, *Object) error { return nil }

func (weather) verify(context.Context, SessionState, *Object, []OutputItem, *ValidationErrors) ([]Field, error) {
	return []Field{{"reward", PyFloat(1.0)}}, nil
}
