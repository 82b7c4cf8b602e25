package fleetbench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// WriteTasks writes the first n rows of the extraction task file src to dst, each with a note of
// words words appended to its question (0: the rows as they are): the task's own world (its
// sources and records) in words, so that a rollout's context is mostly its own rather than the
// system-and-tools prefix every task shares. It is the long-context workload of the fleet
// benchmarks.
func WriteTasks(dst, src string, n, words int) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	var b strings.Builder
	for line := 1; line <= n; line++ {
		if !sc.Scan() {
			if err := sc.Err(); err != nil {
				return err
			}
			return fmt.Errorf("%s: %d rows, want %d", src, line-1, n)
		}
		row := sc.Text()
		if words > 0 {
			if row, err = withNote(row, words); err != nil {
				return fmt.Errorf("%s:%d: %w", src, line, err)
			}
		}
		b.WriteString(row)
		b.WriteByte('\n')
	}
	return os.WriteFile(dst, []byte(b.String()), 0o644)
}

// withNote appends a note of words words, made of the row's world, to its first input message.
func withNote(line string, words int) (string, error) {
	var row map[string]any
	if err := json.Unmarshal([]byte(line), &row); err != nil {
		return "", err
	}
	world, _ := json.Marshal(row["world"])
	fields := strings.Fields(strings.NewReplacer(`"`, " ", "{", " ", "}", " ", ",", " ", "[", " ", "]", " ", ":", " ").Replace(string(world)))
	if len(fields) == 0 {
		return "", fmt.Errorf("world: no words for a note")
	}
	note := make([]string, words)
	for i := range note {
		note[i] = fields[i%len(fields)]
	}
	params, _ := row["responses_create_params"].(map[string]any)
	input, _ := params["input"].([]any)
	if len(input) == 0 {
		return "", fmt.Errorf("responses_create_params.input: not a list of messages")
	}
	msg, _ := input[0].(map[string]any)
	text, ok := msg["content"].(string)
	if !ok {
		return "", fmt.Errorf("responses_create_params.input[0].content: not a string")
	}
	msg["content"] = text + " Notes on file for this question: " + strings.Join(note, " ") + "."
	out, err := json.Marshal(row)
	return string(out), err
}
