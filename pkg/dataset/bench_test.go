package dataset

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
)

// BenchmarkReadRow parses NeMo Gym example_multi_step rows (about 12 KB
// each, with the full synonym list in the system prompt).
func BenchmarkReadRow(b *testing.B) {
	data, err := os.ReadFile("../../testdata/nemo-gym/example_multi_step/example.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Count(data, []byte("\n"))
	b.SetBytes(int64(len(data) / lines))
	b.ReportAllocs()
	var r *Reader
	for i := 0; i < b.N; i++ {
		if i%lines == 0 {
			r, _ = NewReader(bytes.NewReader(data), "bench")
		}
		t, err := r.Next()
		if err != nil && err != io.EOF {
			b.Fatal(err)
		}
		if t != nil && t.Err != nil {
			b.Fatal(t.Err)
		}
	}
}

// smallRow is a typical small task row (about 1 KB): a system and a user message, two tools,
// sampling settings, an agent_ref and a few extra fields for /verify.
const smallRow = `{"id":"weather-0042","agent_ref":{"type":"responses_api_agents","name":"weather_simple_agent"},` +
	`"responses_create_params":{"input":[{"role":"system","content":"You are a weather assistant.\nUse the tools to look up forecasts; never guess.\nAnswer in one short sentence, in Celsius."},` +
	`{"role":"user","content":"Will it rain in Paris or in Berlin tomorrow (2025-06-12)? Which one is warmer?"}],` +
	`"tools":[{"type":"function","name":"get_forecast","description":"Forecast for one city and date: temperature in Celsius and the chance of rain.",` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string","description":"City name, e.g. Paris."},"date":{"type":"string","description":"YYYY-MM-DD."}},"required":["city","date"],"additionalProperties":false},"strict":true},` +
	`{"type":"function","name":"submit_answer","description":"Submit the final answer.","parameters":{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"],"additionalProperties":false},"strict":true}],` +
	`"parallel_tool_calls":true,"temperature":0.7,"max_output_tokens":1024},` +
	`"expected_answer":{"rain":["Berlin"],"warmer":"Paris"},"category":"weather","difficulty":"easy"}`

// BenchmarkReadRowSmall reads a file of typical small rows (smallRow), through the Reader.
func BenchmarkReadRowSmall(b *testing.B) {
	const lines = 1000
	data := []byte(strings.Repeat(smallRow+"\n", lines))
	b.SetBytes(int64(len(smallRow) + 1))
	b.ReportAllocs()
	var r *Reader
	for i := 0; i < b.N; i++ {
		if i%lines == 0 {
			r, _ = NewReader(bytes.NewReader(data), "bench")
		}
		t, err := r.Next()
		if err != nil || t.Err != nil {
			b.Fatal(err, t.Err)
		}
	}
}

// BenchmarkParseRow is the parsing of one row alone (no reading, no copy of the line): the
// NeMo Gym example_multi_step row and the small one.
func BenchmarkParseRow(b *testing.B) {
	data, err := os.ReadFile("../../testdata/nemo-gym/example_multi_step/example.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	nemo, _, _ := bytes.Cut(data, []byte("\n"))
	for _, c := range []struct {
		name string
		row  []byte
	}{{"nemo", nemo}, {"small", []byte(smallRow)}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.row)))
			b.ReportAllocs()
			for b.Loop() {
				t := Task{Raw: c.row}
				if err := t.parse(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
