"""Renders a chat with a chat template as Hugging Face transformers' apply_chat_template does.

transformers (src/transformers/utils/chat_template_utils.py, _compile_jinja_template) compiles
the template in a jinja2 ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
loopcontrols extension, its AssistantTracker extension (the {% generation %} tag, whose rendered
blocks' character ranges return_assistant_tokens_mask turns into the assistant mask), a tojson
filter that is json.dumps(x, ensure_ascii=False, ...) and the raise_exception global, then renders
it with messages, tools, add_generation_prompt and the tokenizer's special tokens. This script does
the same without transformers (no PyPI here), for the test suites.

stdin: {"template": PATH, "messages": [...], "tools": [...] or null, "add_generation_prompt": bool,
        "special": {"bos_token": ...} (optional), "mode": "text" (default), "spans" or "verl"}
stdout:
  text:  the rendered text.
  spans: {"text": ..., "generation": [[start, end], ...]}: the text, and the character ranges of
         the {% generation %} blocks as transformers' AssistantTracker records them (TRL's
         assistant_only_loss masks the tokens in them).
  verl:  {"text": ..., "trainable": [[start, end], ...], "error": ...}: verl's multi-turn SFT
         (verl/utils/dataset/multiturn_sft_dataset.py, MultiTurnSFTDataset at b178a3c) done on
         characters rather than tokens: each message rendered alone (tools with the first only),
         the default system prompt cut from every later non-system message, an assistant
         message trainable but for the generation prompt, the pieces joined; "error" is
         sanity_check's assertion when the joined pieces are not the whole conversation's render,
         or transformers' ValueError when tools is not a list of dicts.
"""
import json
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


class Generation(Extension):
    """The {% generation %} tag: each block's character range in what was rendered before it."""

    tags = {"generation"}

    def __init__(self, environment):
        super().__init__(environment)
        self.blocks = None
        self.ranges = None

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation", []), [], [], body).set_lineno(lineno)

    def _generation(self, caller):
        rv = caller()
        if self.blocks is not None:
            start = len("".join(self.blocks))
            self.ranges.append([start, start + len(rv)])
        return rv


def compile_template(path):
    with open(path, encoding="utf-8") as f:
        source = f.read()
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, Generation])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source), env.extensions[Generation.identifier]


def main():
    req = json.load(sys.stdin)
    template, tracker = compile_template(req["template"])
    special = req.get("special") or {}

    def render(messages, tools, generation_prompt):
        return template.render(messages=messages, tools=tools, add_generation_prompt=generation_prompt, **special)

    mode = req.get("mode", "text")
    messages, tools = req["messages"], req.get("tools")
    if mode == "text":
        sys.stdout.write(render(messages, tools, req.get("add_generation_prompt", False)))
    elif mode == "spans":
        tracker.blocks, tracker.ranges = [], []
        for block in template.generate(messages=messages, tools=tools, add_generation_prompt=False, **special):
            tracker.blocks.append(block)
        json.dump({"text": "".join(tracker.blocks), "generation": tracker.ranges}, sys.stdout)
    elif mode == "verl":
        # transformers' apply_chat_template takes tools as a list of JSON schemas (dicts) or
        # functions, and raises on anything else (a JSON string's characters, for one).
        if tools is not None and not all(isinstance(tool, dict) for tool in tools):
            json.dump({"text": "", "trainable": [], "error": "ValueError: Tools should either be a JSON schema, or a callable function with type hints and a docstring suitable for auto-conversion to a schema."}, sys.stdout)
            return
        # verl.utils.chat_template.extract_system_prompt_and_generation
        one = render([{"role": "user", "content": ""}], None, False)
        two = render([{"role": "user", "content": ""}] * 2, None, False)
        system_prompt = one[: -(len(two) - len(one))]
        generation_prompt = render([{"role": "user", "content": ""}], None, True)[len(one):]
        text, trainable = "", []
        for i, message in enumerate(messages):
            piece = render([message], tools if i == 0 else None, False)
            if i != 0 and message["role"] != "system":
                piece = piece[len(system_prompt):]
            if message["role"] == "assistant":
                trainable.append([len(text) + len(generation_prompt), len(text) + len(piece)])
            text += piece
        whole = render(messages, tools, False)
        error = None
        if text != whole:
            error = "MultiTurnSFTDataset apply_chat_template to each turn separately and concat `input_ids` as a whole sequence, which may not equal to apply_chat_template to whole messages at once."
        json.dump({"text": text, "trainable": trainable, "error": error}, sys.stdout)


main()
