#!/usr/bin/env python3
"""Writes the golden renderings in testdata/golden/ for golden_test.go.

Run from internal/chat:  python3 testdata/gen_golden.py ../../../shared/testdata/chat-templates

It renders every template in that directory against every case in
testdata/cases.json with Python's Jinja2 set up the way Hugging Face
transformers' apply_chat_template sets it up (sandboxed environment,
trim_blocks, lstrip_blocks, loopcontrols, a tojson that keeps key order and
does not escape non-ASCII or HTML, raise_exception, strftime_now). That is the
reference the Go package must match byte for byte. Jinja2 3.1.6 produced the
checked-in files; nothing here is run by the tests.

The messages are shaped from the case (kvserve's Message fields) by the rules
the Go package documents, written out again here independently:

- assistant tool calls become {"id", "type": "function", "function": {"name",
  "arguments"}}; arguments are the parsed JSON object for templates that can
  only print an object (ARGS_AS_OBJECT), the client's JSON text otherwise;
- an assistant message with tool calls and no text has content None for the
  templates that test `content is none` to find tool calls (CONTENT_NONE),
  "" otherwise;
- reasoning_content is set when there is reasoning; templates that read
  `tool_plan` (Command R7B) get it there too;
- tools become {"type": "function", "function": {"name", "description",
  "parameters"}} and are only defined when there are some;
- every render gets bos_token, eos_token, add_generation_prompt, date_string
  (the fixed "now" as %d %b %Y), tools_in_user_message = false, and
  Firefunction v2 gets functions (the tools as JSON, indent 2) and datetime.

One deviation from transformers: tojson turns a generator (what Jinja2's map
filter returns) into a list, as minja, llama.cpp's Jinja engine, does;
llama-cpp-deepseek-r1.jinja was written for minja and pipes map() into
tojson, which transformers cannot render at all.

Output: golden/<template stem>/<case>.txt, or <case>.err holding the error
message when the template refuses the conversation.
"""

import json
import os
import types
import sys
from datetime import datetime, timezone

import jinja2
import jinja2.ext
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

ARGS_AS_OBJECT = {
    "CohereForAI-c4ai-command-r-plus-tool_use",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
    "Qwen-Qwen2.5-7B-Instruct",
    "meta-llama-Llama-3.1-8B-Instruct",
    "meta-llama-Llama-3.2-3B-Instruct",
    "meta-llama-Llama-3.3-70B-Instruct",
    "mistralai-Mistral-Nemo-Instruct-2407",
}

CONTENT_NONE = {
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    "llama-cpp-deepseek-r1",
}


def make_env(now):
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        if isinstance(x, types.GeneratorType):  # what map() returns; minja makes it a list
            x = list(x)
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def shape_messages(case, stem, src):
    out = []
    for m in case["messages"]:
        d = {"role": m["role"]}
        content = m.get("content", "")
        calls = m.get("tool_calls") or []
        if calls and content == "" and stem in CONTENT_NONE:
            content = None
        d["content"] = content
        if m.get("reasoning_content"):
            d["reasoning_content"] = m["reasoning_content"]
            if "tool_plan" in src:
                d["tool_plan"] = m["reasoning_content"]
        if calls:
            d["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {
                        "name": c["name"],
                        "arguments": json.loads(c["arguments"]) if stem in ARGS_AS_OBJECT else c["arguments"],
                    },
                }
                for c in calls
            ]
        if m.get("tool_call_id"):
            d["tool_call_id"] = m["tool_call_id"]
        if m.get("name"):
            d["name"] = m["name"]
        out.append(d)
    return out


def main():
    tdir = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    spec = json.load(open(os.path.join(here, "cases.json"), encoding="utf-8"))
    now = datetime.fromisoformat(spec["now"].replace("Z", "+00:00")).astimezone(timezone.utc)
    env = make_env(now)
    tools = [{"type": "function", "function": t} for t in spec["tools"]]
    for name in sorted(os.listdir(tdir)):
        if not name.endswith(".jinja"):
            continue
        stem = name[: -len(".jinja")]
        src = open(os.path.join(tdir, name), encoding="utf-8").read()
        outdir = os.path.join(here, "golden", stem)
        os.makedirs(outdir, exist_ok=True)
        for case in spec["cases"]:
            ctx = {
                "messages": shape_messages(case, stem, src),
                "bos_token": spec["bos"],
                "eos_token": spec["eos"],
                "add_generation_prompt": case["generation_prompt"],
                "date_string": now.strftime("%d %b %Y"),
                "tools_in_user_message": False,
            }
            if case.get("tools"):
                ctx["tools"] = tools
            if " functools[" in src:
                ctx["functions"] = json.dumps(tools, indent=2, ensure_ascii=False) if case.get("tools") else ""
                ctx["datetime"] = now.strftime("%b %d %Y %H:%M:%S GMT")
            base = os.path.join(outdir, case["name"])
            for ext in (".txt", ".err"):
                if os.path.exists(base + ext):
                    os.remove(base + ext)
            try:
                text = env.from_string(src).render(**ctx)
                with open(base + ".txt", "w", encoding="utf-8", newline="") as f:
                    f.write(text)
            except Exception as e:  # the template refused: record why
                with open(base + ".err", "w", encoding="utf-8", newline="") as f:
                    f.write(f"{type(e).__name__}: {e}\n")


if __name__ == "__main__":
    main()
