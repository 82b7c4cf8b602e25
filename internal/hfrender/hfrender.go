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
