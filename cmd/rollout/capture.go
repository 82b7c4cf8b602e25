package main

import (
	"fmt"
	"io"
	"sync"
)

// noTokensWarning is --capture-tokens' warning, given once per run: the first model call that
// came back without token ids names why; the calls are recorded without them.
func noTokensWarning(stderr io.Writer) func(reason string) {
	var once sync.Once
	return func(reason string) {
		once.Do(func() {
			fmt.Fprintf(stderr, "rollout: warning: --capture-tokens: %s; model calls are recorded without token ids (vLLM returns them; OpenAI does not)\n", reason)
		})
	}
}
