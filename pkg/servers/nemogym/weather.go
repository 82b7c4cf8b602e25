package nemogym

import (
	"context"

	"github.com/rollout-dev/rollout/pkg/servers/gym"
	"github.com/rollout-dev/rollout/pkg/servers/store"
)

// SingleToolCall is NeMo Gym's example_single_tool_call server (see weather).
var SingleToolCall = gym.Builtin{Name: "example_single_tool_call", Class: "SimpleWeatherResourcesServer", New: newWeather}

// weather is example_single_tool_call (formerly example_simple_weather): one tool, get_weather
// {city} → {"city": city, "weather_description": "The weather in <city> is cold."}; verify always
// answers reward 1.0. Stateless.
type weather struct{}

func newWeather(string, store.Store) gym.ResourceServer { return weather{} }

func (weather) Tool(name string) (gym.ToolFunc, bool) {
	if name == "get_weather" {
		return getWeather, true
	}
	return nil, false
}

func getWeather(_ context.Context, _ string, body []byte) ([]gym.Field, error) {
	city, err := gym.Arg(body, "city", gym.LaxString)
	if err != nil {
		return nil, err
	}
	return []gym.Field{
		{Key: "city", Value: city},
		{Key: "weather_description", Value: "The weather in " + city + " is cold."},
	}, nil
}

func (weather) SeedSession(context.Context, string, *gym.Object) error { return nil }

func (weather) Verify(context.Context, gym.SessionState, *gym.Object, []gym.OutputItem, *gym.ValidationErrors) ([]gym.Field, error) {
	return []gym.Field{{Key: "reward", Value: gym.PyFloat(1.0)}}, nil
}
