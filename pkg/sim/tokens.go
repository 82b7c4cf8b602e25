package sim

import (
	"hash/fnv"
	"strconv"
)

// The simulator's stand-in tokenizer: one token per 4 bytes of text, the same estimate as its
// usage counts, so that a call's prompt_token_ids has usage.prompt_tokens ids and its
// generation completion_tokens ids. A token's id is a hash of its 4 bytes (below vocabSize),
// its log-probability a hash of (id, position) in (-4, 0]: deterministic, like every answer.
//
// What a request gets back follows vLLM's OpenAI-compatible server:
//   - "logprobs": true: choices[0].logprobs.content, one {"token", "logprob", "bytes",
//     "top_logprobs": []} per generated token; the token is its text, or "token_id:N" when
//     the request has "return_tokens_as_token_ids": true.
//   - "return_token_ids": true: "prompt_token_ids" at the top level and choices[0].token_ids.
const vocabSize = 151_000

// tokenIDs cuts text into n tokens of 4 bytes (the last takes what is left; a text shorter
// than n tokens gets ids from its position) and returns their ids and texts.
func tokenIDs(text string, n int) ([]int32, []string) {
	ids := make([]int32, n)
	texts := make([]string, n)
	for i := range n {
		var chunk string
		switch {
		case 4*i+4 <= len(text) && i < n-1:
			chunk = text[4*i : 4*i+4]
		case 4*i < len(text):
			chunk = text[4*i:]
		default:
			chunk = "<" + strconv.Itoa(i) + ">"
		}
		h := fnv.New32a()
		h.Write([]byte(chunk))
		ids[i] = int32(h.Sum32() % vocabSize)
		texts[i] = chunk
	}
	return ids, texts
}

// logProb is the simulated log-probability of token id at position i: in (-4, 0].
func logProb(id int32, i int) float64 {
	x := mix(uint64(id)<<32 | uint64(uint32(i)))
	return -float64(x%4000) / 1000
}

// promptText is the request's messages as the tokenizer reads them: texts and tool calls, in
// order (promptBytes is its length).
func (req *chatRequest) promptText() string {
	b := make([]byte, 0, req.promptBytes())
	for _, m := range req.Messages {
		b = append(b, m.text...)
		for _, tc := range m.ToolCalls {
			b = append(b, tc.Function.Name...)
			b = append(b, tc.Function.Arguments...)
		}
	}
	return string(b)
}

// answerText is what the answer's completion tokens count: its text, or its tool calls'
// names and arguments.
func answerText(ans *answer) string {
	if len(ans.calls) == 0 {
		return ans.content
	}
	var b []byte
	for _, c := range ans.calls {
		b = append(b, c.Function.Name...)
		b = append(b, c.Function.Arguments...)
	}
	return string(b)
}

type logprobToken struct {
	Token       string  `json:"token"`
	Logprob     float64 `json:"logprob"`
	Bytes       []int   `json:"bytes"`
	TopLogprobs []any   `json:"top_logprobs"`
}

type logprobContent struct {
	Content []logprobToken `json:"content"`
}

// splicedPrompt is the prompt's ids when the request's latest assistant message carries its
// call's prompt and generation ids (as NeMo Gym sends them): those ids, then the ids of the
// messages after it. This is what NeMo RL's OpenAI-compatible servers do
// (replace_prefix_tokens: the model's own ids up to the end of its last turn, the template's
// after), so that a call's prompt begins with the previous call's prompt and generated ids;
// re-tokenizing the previous answer's text would cut it at other places. nil when no
// assistant message carries ids.
func (req *chatRequest) splicedPrompt() []int32 {
	for k := len(req.Messages) - 1; k >= 0; k-- {
		m := &req.Messages[k]
		if m.Role != "assistant" {
			continue
		}
		if m.PromptTokenIDs == nil || len(m.GenerationTokenIDs) == 0 {
			continue
		}
		var rest []byte
		for _, m := range req.Messages[k+1:] {
			rest = append(rest, m.text...)
			for _, tc := range m.ToolCalls {
				rest = append(rest, tc.Function.Name...)
				rest = append(rest, tc.Function.Arguments...)
			}
		}
		tail, _ := tokenIDs(string(rest), len(rest)/4)
		out := make([]int32, 0, len(m.PromptTokenIDs)+len(m.GenerationTokenIDs)+len(tail))
		out = append(out, m.PromptTokenIDs...)
		out = append(out, m.GenerationTokenIDs...)
		return append(out, tail...)
	}
	return nil
}

// addTokens adds to out what the request asked for of its tokens: prompt (prompt_tokens
// ids, or spliced when the request sent its earlier ids) and completion (completion_tokens ids).
func addTokens(out *chatCompletion, req *chatRequest, ans *answer, spliced []int32, prompt, completion int) {
	if !req.Logprobs && !req.ReturnTokenIDs {
		return
	}
	gen, texts := tokenIDs(answerText(ans), completion)
	if req.ReturnTokenIDs {
		out.PromptTokenIDs = spliced
		if spliced == nil {
			out.PromptTokenIDs, _ = tokenIDs(req.promptText(), prompt)
		}
		out.Choices[0].TokenIDs = gen
	}
	if req.Logprobs {
		lp := logprobContent{Content: make([]logprobToken, len(gen))}
		for i, id := range gen {
			tok := texts[i]
			if req.ReturnTokensAsTokenIDs {
				tok = "token_id:" + strconv.Itoa(int(id))
			}
			lp.Content[i] = logprobToken{Token: tok, Logprob: logProb(id, i), TopLogprobs: []any{}}
		}
		out.Choices[0].Logprobs = lp
	}
}
