#!/usr/bin/python3
"""Writes the interop suite's test models: tiny Qwen2-architecture GGUF files with seeded random
weights and the real Qwen2 tokenizer and Qwen2.5 chat template, for llama.cpp's llama-server.

    /usr/bin/python3 test/interop/gen_models.py CACHE_DIR OUT_DIR

CACHE_DIR is what build-llama-server.sh prints (it holds gguf-py, the Qwen2 vocab and the
chat template from the same llama.cpp source as the server). Three models are written:

  noise.gguf     random weights: its text is noise, but the server's templating, tokenizer,
                 sampler, grammar and parsers are real.
  toolcall.gguf  attention and feed-forward outputs zeroed, so that the next token depends on
                 the current one only, and the embeddings and output head wired by hand so
                 that after the prompt's last token ("\\n" after "<|im_start|>assistant") it
                 writes the Hermes block (see chain_of)
                 <tool_call>\\n\\n{"name":"get_counter_value","arguments":{}}\\n</tool_call><|im_end|>
                 (151657/151658 are Qwen2.5's tool-call markers): a native tool call that the
                 server's parser turns into tool_calls.
  jsoncall.gguf  wired the same way to answer in rollout's JSON tool mode:
                 {"tool_calls":[{"name":"get_counter_value","arguments":{}}]}
  empty.gguf     wired the same way to end its answer at once: an empty answer.

The weights come from numpy's seeded generator: the same inputs give the same files.
"""
import os
import sys

import numpy as np

N_EMBD, N_HEAD, N_HEAD_KV, N_FF, N_LAYER, N_CTX = 64, 4, 2, 128, 2, 4096
TOOL_CALL_TEXT = '{"name":"get_counter_value","arguments":{}}'
JSON_MODE_TEXT = '{"tool_calls":[{"name":"get_counter_value","arguments":{}}]}'
TOOL_CALL_OPEN, TOOL_CALL_CLOSE, IM_END = "<tool_call>", "</tool_call>", "<|im_end|>"
PROMPT_END = "\n"  # the last token of "<|im_start|>assistant\n"
WIRED_LOGIT = 12.0  # times sqrt(N_EMBD) after the RMS norm: far above every other logit


def bytes_to_unicode():
    """GPT-2's byte-level BPE alphabet: byte -> the character its vocab strings use."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


# Qwen2.5's added tokens after <|im_end|> (its tokenizer_config.json), which llama.cpp's Qwen2
# vocab file (made from Qwen2) has as [PADn] placeholders. The "special" ones are control
# tokens (type 3); the tool-call markers, FIM and repo tokens are user-defined (type 4): the
# server writes them out as text, where its tool-call parser finds them.
QWEN25_ADDED = [
    ("<|object_ref_start|>", 3), ("<|object_ref_end|>", 3), ("<|box_start|>", 3), ("<|box_end|>", 3),
    ("<|quad_start|>", 3), ("<|quad_end|>", 3), ("<|vision_start|>", 3), ("<|vision_end|>", 3),
    ("<|vision_pad|>", 3), ("<|image_pad|>", 3), ("<|video_pad|>", 3), ("<tool_call>", 4),
    ("</tool_call>", 4), ("<|fim_prefix|>", 4), ("<|fim_middle|>", 4), ("<|fim_suffix|>", 4),
    ("<|fim_pad|>", 4), ("<|repo_name|>", 4), ("<|file_sep|>", 4),
]


def load_vocab(gguf, path):
    r = gguf.GGUFReader(path)

    def field(name):
        return r.fields[name].contents()

    tokens, types = field("tokenizer.ggml.tokens"), field("tokenizer.ggml.token_type")
    for i, (tok, typ) in enumerate(QWEN25_ADDED):
        idx = 151646 + i
        if tokens[idx] != f"[PAD{idx}]":
            raise SystemExit(f"gen_models: token {idx} is {tokens[idx]!r}, want a placeholder")
        tokens[idx], types[idx] = tok, typ
    return tokens, types, field("tokenizer.ggml.merges")


def tokenize(text, index):
    """Greedy longest match of text's byte-level form over the vocab (enough for short ASCII)."""
    b2u = bytes_to_unicode()
    s = "".join(b2u[b] for b in text.encode())
    out, i = [], 0
    longest = max(len(t) for t in index)
    while i < len(s):
        for j in range(min(len(s), i + longest), i, -1):
            if s[i:j] in index:
                out.append(index[s[i:j]])
                i = j
                break
        else:
            raise SystemExit(f"gen_models: no token for {s[i:]!r}")
    return out


def chain_of(index):
    """The token ids a wired model writes after the prompt, each the successor of the one before.

    llama-server's parser for the Qwen2.5 template reads "<tool_call>\n", white space, the
    JSON call, white space, "</tool_call>". A bigram model cannot write "\n" (the prompt's
    last token) again without looping, so the block is written with "\n\n" after the
    opening marker and "}\n" at the end, which are tokens of their own.
    """
    return [index[TOOL_CALL_OPEN]] + tokenize("\n\n" + TOOL_CALL_TEXT + "\n", index) + [index[TOOL_CALL_CLOSE], index[IM_END]]


def write_model(gguf, path, name, vocab, template, chain, seed):
    tokens, types, merges = vocab
    n_vocab = len(tokens)
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "qwen2")
    w.add_name(name)
    w.add_block_count(N_LAYER)
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(151643)
    w.add_eos_token_id(151645)  # <|im_end|>, as in Qwen2.5 Instruct
    w.add_pad_token_id(151643)
    w.add_add_bos_token(False)
    w.add_chat_template(template)

    def rand(*shape, scale=0.02):
        return (rng.standard_normal(shape) * scale).astype(np.float16)

    wired = chain is not None
    embd = rand(n_vocab, N_EMBD, scale=1.0)
    out = rand(n_vocab, N_EMBD, scale=0.5)
    if wired:
        # Token chain[k] gets basis vector k as its embedding; with the layers' outputs zeroed
        # the last hidden state is that vector (times sqrt(N_EMBD) after the RMS norm), and
        # column k of the head is zero but for the successor's row: the successor wins.
        for k, tok in enumerate(chain[:-1]):
            embd[tok] = 0
            embd[tok, k] = 1
        out[:, : len(chain) - 1] = 0
        for k in range(len(chain) - 1):
            out[chain[k + 1], k] = WIRED_LOGIT
    w.add_tensor("token_embd.weight", embd)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor("output.weight", out)
    head = N_EMBD // N_HEAD
    kv = head * N_HEAD_KV
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", rand(N_EMBD, N_EMBD, scale=0.3))
        w.add_tensor(p + "attn_q.bias", np.zeros(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "attn_k.weight", rand(kv, N_EMBD, scale=0.3))
        w.add_tensor(p + "attn_k.bias", np.zeros(kv, dtype=np.float32))
        w.add_tensor(p + "attn_v.weight", rand(kv, N_EMBD, scale=0.3))
        w.add_tensor(p + "attn_v.bias", np.zeros(kv, dtype=np.float32))
        wo = rand(N_EMBD, N_EMBD, scale=0.3)
        down = rand(N_EMBD, N_FF, scale=0.3)
        if wired:
            wo[:] = 0
            down[:] = 0
        w.add_tensor(p + "attn_output.weight", wo)
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", rand(N_FF, N_EMBD, scale=0.3))
        w.add_tensor(p + "ffn_up.weight", rand(N_FF, N_EMBD, scale=0.3))
        w.add_tensor(p + "ffn_down.weight", down)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: gen_models.py CACHE_DIR OUT_DIR")
    cache, out = sys.argv[1], sys.argv[2]
    sys.path.insert(0, os.path.join(cache, "gguf-py"))
    import gguf

    vocab = load_vocab(gguf, os.path.join(cache, "models", "ggml-vocab-qwen2.gguf"))
    with open(os.path.join(cache, "models", "templates", "Qwen-Qwen2.5-7B-Instruct.jinja")) as f:
        template = f.read()
    index = {t: i for i, t in enumerate(vocab[0])}
    for tok, want in ((TOOL_CALL_OPEN, 151657), (TOOL_CALL_CLOSE, 151658), (IM_END, 151645)):
        if index.get(tok) != want:
            raise SystemExit(f"gen_models: {tok} is token {index.get(tok)}, want {want}")
    start = tokenize(PROMPT_END, index)
    chains = {
        "toolcall": start + chain_of(index),
        "jsoncall": start + tokenize(JSON_MODE_TEXT, index) + [index[IM_END]],
        "empty": start + [index[IM_END]],
    }
    for name, chain in chains.items():
        if len(set(chain)) != len(chain) or len(chain) > N_EMBD:
            raise SystemExit(f"gen_models: the {name} chain {chain} repeats a token or is too long")
    os.makedirs(out, exist_ok=True)
    write_model(gguf, os.path.join(out, "noise.gguf"), "rollout-interop-noise", vocab, template, None, 1)
    for seed, (name, chain) in enumerate(chains.items(), start=2):
        write_model(gguf, os.path.join(out, name + ".gguf"), "rollout-interop-" + name, vocab, template, chain, seed)
    print(f"gen_models: wrote noise.gguf and the wired {', '.join(f'{n}.gguf {c}' for n, c in chains.items())} in {out}")


if __name__ == "__main__":
    main()
