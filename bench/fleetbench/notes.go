package fleetbench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"unicode"
)

// WriteTasks writes the first n rows of the extraction task file src to dst, each with a note of
// words words appended to its question (0: the rows as they are). It is the long-context
// workload of the fleet benchmarks: a rollout's context is then mostly its own rather than the
// system-and-tools prefix every task shares. A row's note is its own (words drawn with the row's
// number as the seed) and made only of words the tasks already use (their instructions, tool
// descriptions and questions, letters only), so that a small model trained on such tasks still
// reads the question and calls tools, rather than copying ids and numbers out of the note.
func WriteTasks(dst, src string, n, words int) error {
	rows, err := readRows(src, n)
	if err != nil {
		return err
	}
	var vocab []string
	if words > 0 {
		if vocab, err = noteVocabulary(src, rows); err != nil {
			return err
		}
	}
	var b strings.Builder
	for i, row := range rows {
		if words > 0 {
			if row, err = withNote(row, note(vocab, words, uint64(i+1))); err != nil {
				return fmt.Errorf("%s:%d: %w", src, i+1, err)
			}
		}
		b.WriteString(row)
		b.WriteByte('\n')
	}
	return os.WriteFile(dst, []byte(b.String()), 0o644)
}

func readRows(src string, n int) ([]string, error) {
	f, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	var rows []string
	for len(rows) < n && sc.Scan() {
		rows = append(rows, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rows) < n {
		return nil, fmt.Errorf("%s: %d rows, want %d", src, len(rows), n)
	}
	return rows, nil
}

// taskText is what a note may draw its words from.
type taskText struct {
	Params struct {
		Instructions string `json:"instructions"`
		Input        []struct {
			Content any `json:"content"`
		} `json:"input"`
		Tools []struct {
			Description string `json:"description"`
		} `json:"tools"`
	} `json:"responses_create_params"`
}

// noteVocabulary is the sorted set of the rows' words (lower case, letters only).
func noteVocabulary(src string, rows []string) ([]string, error) {
	seen := map[string]bool{}
	for i, row := range rows {
		var t taskText
		if err := json.Unmarshal([]byte(row), &t); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", src, i+1, err)
		}
		texts := []string{t.Params.Instructions}
		for _, m := range t.Params.Input {
			if s, ok := m.Content.(string); ok {
				texts = append(texts, s)
			}
		}
		for _, tl := range t.Params.Tools {
			texts = append(texts, tl.Description)
		}
		for _, text := range texts {
			for _, w := range strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) }) {
				seen[strings.ToLower(w)] = true
			}
		}
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("%s: no words in the tasks' instructions, questions or tool descriptions for a note", src)
	}
	vocab := make([]string, 0, len(seen))
	for w := range seen {
		vocab = append(vocab, w)
	}
	slices.Sort(vocab)
	return vocab, nil
}

// note is words words of vocab drawn with seed.
func note(vocab []string, words int, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 0x6e6f7465))
	out := make([]string, words)
	for i := range out {
		out[i] = vocab[rng.IntN(len(vocab))]
	}
	return strings.Join(out, " ")
}

// withNote appends the note to the row's first input message.
func withNote(line, note string) (string, error) {
	var row map[string]any
	if err := json.Unmarshal([]byte(line), &row); err != nil {
		return "", err
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
	msg["content"] = text + " Notes on file for this question: " + note + "."
	out, err := json.Marshal(row)
	return string(out), err
}
