// Package hfrender renders chats with a chat template as Hugging Face transformers'
// apply_chat_template does, through render_hf.py (python3 with jinja2, set up as transformers
// sets it up), for the tests that compare rollout's training data with what the trainers render.
package hfrender

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Python is a python3 that has jinja2, or the test skips (fails under CI=true, where .ci/run
// installs python3-jinja2).
func Python(t testing.TB) string {
	t.Helper()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(py, "-c", "import jinja2.sandbox, jinja2.ext").Run() == nil {
			return py
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no python3 with jinja2 (Debian: apt-get install -y python3-jinja2)")
	}
	t.Skip("no python3 with jinja2 (Debian: apt-get install -y python3-jinja2): the HF render cannot run")
	return ""
}

// Request is what render_hf.py reads: the template's path, the chat, and the mode ("text",
// "spans" or "verl"; see the script).
type Request struct {
	Template            string            `json:"template"`
	Messages            any               `json:"messages"`
	Tools               any               `json:"tools"`
	AddGenerationPrompt bool              `json:"add_generation_prompt"`
	Special             map[string]string `json:"special,omitempty"`
	Mode                string            `json:"mode,omitempty"`
}

// Run runs render_hf.py with py on req and returns what it wrote.
func Run(py string, req Request) ([]byte, error) {
	in, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command(py, filepath.Join(filepath.Dir(file), "render_hf.py"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, stderr.String())
	}
	return out, nil
}

// Spans is the "spans" and "verl" modes' answer.
type Spans struct {
	Text       string     `json:"text"`
	Generation [][2]int64 `json:"generation"`
	Trainable  [][2]int64 `json:"trainable"`
	Error      *string    `json:"error"`
}

// RunSpans runs a "spans" or "verl" request.
func RunSpans(py string, req Request) (*Spans, error) {
	out, err := Run(py, req)
	if err != nil {
		return nil, err
	}
	var s Spans
	if err := json.Unmarshal(out, &s); err != nil {
		return nil, fmt.Errorf("%v: %.300s", err, out)
	}
	return &s, nil
}

// TRLQwen25 is the path of TRL's Qwen2.5 training template (templates/README.md).
func TRLQwen25() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "templates", "trl-qwen2_5_training.jinja")
}

// CheckMasks compares text and the answers' spans (code points) of one conversation, rendered
// with the Qwen2.5 template at template, with the trainers' masks of the same messages and
// tools: TRL's assistant_only_loss (the {% generation %} blocks of TRL's Qwen2.5 training
// template begin one character before each span, at the generation prompt's newline, and end
// with it) and verl's MultiTurnSFTDataset (the trainable ranges are the spans). verlRefused
// says that verl's sanity check refuses the conversation; problems lists every difference.
func CheckMasks(py, template string, messages, tools any, text string, spans [][2]int64) (verlRefused bool, problems []string, err error) {
	trl, err := RunSpans(py, Request{Template: TRLQwen25(), Messages: messages, Tools: tools, Mode: "spans"})
	if err != nil {
		return false, nil, err
	}
	runes := []rune(text)
	if trl.Text != text || len(trl.Generation) != len(spans) {
		problems = append(problems, fmt.Sprintf("TRL's template renders %d generation blocks (spans: %d) of %q", len(trl.Generation), len(spans), trl.Text))
	} else {
		for k, g := range trl.Generation {
			s := spans[k]
			if g[1] != s[1] || g[0]+1 != s[0] || string(runes[g[0]:s[0]]) != "\n" {
				problems = append(problems, fmt.Sprintf("answer %d: span %v, TRL's generation block %v", k, s, g))
			}
		}
	}
	verl, err := RunSpans(py, Request{Template: template, Messages: messages, Tools: tools, Mode: "verl"})
	if err != nil {
		return false, nil, err
	}
	if verl.Error != nil {
		return true, problems, nil
	}
	if verl.Text != text || len(verl.Trainable) != len(spans) {
		return false, append(problems, fmt.Sprintf("verl renders %q, trains %v; spans %v", verl.Text, verl.Trainable, spans)), nil
	}
	for k, v := range verl.Trainable {
		if v != spans[k] {
			problems = append(problems, fmt.Sprintf("answer %d: span %v, verl trains %v", k, spans[k], v))
		}
	}
	return false, problems, nil
}
