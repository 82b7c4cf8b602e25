"""Renders a chat with a chat template as Hugging Face transformers' apply_chat_template does.

transformers (src/transformers/utils/chat_template_utils.py, _compile_jinja_template) compiles
the template in a jinja2 ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
loopcontrols extension, a tojson filter that is json.dumps(x, ensure_ascii=False, ...) and the
raise_exception global, then renders it with messages, tools and add_generation_prompt. This
script does the same without transformers (no PyPI here), for the interop suite.

stdin: {"template": PATH, "messages": [...], "tools": [...] or null, "add_generation_prompt": bool}
stdout: the rendered text.
"""
import json
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def main():
    req = json.load(sys.stdin)
    with open(req["template"], encoding="utf-8") as f:
        source = f.read()
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    out = env.from_string(source).render(
        messages=req["messages"], tools=req.get("tools"), add_generation_prompt=req.get("add_generation_prompt", False)
    )
    sys.stdout.write(out)


main()
