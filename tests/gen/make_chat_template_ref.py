#!/usr/bin/env python3
"""make_chat_template_ref.py - expected chat renders for tests/test_chat_jinja.c.

The oracle is transformers' own chat-template environment: the function
apply_chat_template compiles templates with (_compile_jinja_template: sandboxed
Jinja2 with trim_blocks, lstrip_blocks, loopcontrols, its tojson, raise_exception
and strftime_now), rendered with the same keyword arguments apply_chat_template
passes (messages, tools=None or TOOLS, documents=None, add_generation_prompt, and the
special tokens). No model is downloaded; templates are data files.

  python3 -m venv /tmp/venv-chat
  /tmp/venv-chat/bin/pip install -r tests/gen/requirements-chat.txt
  /tmp/venv-chat/bin/python tests/gen/make_chat_template_ref.py [--from-llama-cpp REPO]

--from-llama-cpp REPO first (re)writes the .jinja files taken from a llama.cpp
checkout (models/templates/*.jinja and the strings in tests/test-chat-template.cpp).
Writes tests/data/chat/expected.json.
"""
import ast
import datetime
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "chat")

# strftime_now is pinned so renders are reproducible (the C test passes the same time)
NOW_UNIX = 1721952000  # 2024-07-26 00:00:00 UTC

# (file, bos_token, eos_token)
TEMPLATES = [
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    ("meta-llama-Llama-3.2-3B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama-3-simple.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    ("Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>"),
    ("Qwen-Qwen3-8B.jinja", "", "<|im_end|>"),
    ("google-gemma-2-2b-it.jinja", "<bos>", "<eos>"),
    ("google-gemma-3-4b-it.jinja", "<bos>", "<eos>"),
    ("google-gemma-7b-it.jinja", "<bos>", "<eos>"),
    ("microsoft-Phi-3.5-mini-instruct.jinja", "<s>", "<|endoftext|>"),
    ("phi-3-small.jinja", "<s>", "<|endoftext|>"),
    ("smollm2-135m-instruct.jinja", "<|im_start|>", "<|im_end|>"),
    ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
     "<\uff5cend\u2581of\u2581sentence\uff5c>"),
    ("deepseek-v2.jinja", "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"),
    ("mistral-v1-system.jinja", "<s>", "</s>"),
    ("mistral-v3-large-2407.jinja", "<s>", "</s>"),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>"),
    ("mistral-v7-large-2411.jinja", "<s>", "</s>"),
    ("command-r-plus.jinja", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    ("granite-3.0-8b-instruct.jinja", "<|end_of_text|>", "<|end_of_text|>"),
    ("chatglm3.jinja", "", ""),
    ("features.jinja", "<s>", "</s>"),
    ("minicpm-3b.jinja", "", ""),
]

# chat_template_kwargs a request may send (vLLM's field; apply_chat_template passes
# extra keyword arguments to the template the same way): Qwen3's thinking switch
KWARGS_TEMPLATES = {"Qwen-Qwen3-8B.jinja": {"enable_thinking": False}}
KWARGS_CONVS = ["user", "multi", "think"]

# names in llama.cpp's tests/test-chat-template.cpp -> our file
FROM_TEST_CPP = {
    "Llama-3": "llama-3-simple.jinja",
    "google/gemma-7b-it": "google-gemma-7b-it.jinja",
    "Phi-3-small": "phi-3-small.jinja",
    "DeepSeek-V2": "deepseek-v2.jinja",
    "mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1' template with a system prompt)": "mistral-v1-system.jinja",
    "Mistral-Large-Instruct-2407 (mistralai 'v3' template; modified to have system prompt at start)":
        "mistral-v3-large-2407.jinja",
    "mistralai/Mistral-Large-Instruct-2411 (mistralai 'v7' template)": "mistral-v7-large-2411.jinja",
    "CohereForAI/c4ai-command-r-plus": "command-r-plus.jinja",
    "ibm-granite/granite-3.0-8b-instruct": "granite-3.0-8b-instruct.jinja",
    "ChatGLM3": "chatglm3.jinja",
    "MiniCPM-3B-OpenHermes-2.5-v2-GGUF": "minicpm-3b.jinja",
}

SYS = {"role": "system", "content": "You are a helpful assistant"}
CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello"}],
    "sys_user": [SYS, {"role": "user", "content": "Hello"}],
    "multi": [SYS, {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"},
              {"role": "user", "content": "Who are you"},
              {"role": "assistant", "content": "   I am an assistant   "},
              {"role": "user", "content": "Another question"}],
    "multi_nosys": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"},
                    {"role": "user", "content": "Who are you"}],
    "ends_assistant": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
    # reasoning in an assistant turn, as Qwen3 and DeepSeek R1 write it (their templates split it off)
    "think": [{"role": "user", "content": "2+2?"},
              {"role": "assistant", "content": "<think>\nEasy.\n</think>\n\nIt is 4."},
              {"role": "user", "content": "And 3+3?"},
              {"role": "assistant", "content": "<think>\n\nSix.\n\n</think>\n\n\n6"}],
    "unicode": [{"role": "user",
                 "content": "H\u00e9llo \"q\" 'a' \\ \t\u00fcn\u00efc\u00f6d\u00e9 \u4f60\u597d {{ x }} {% if %}\n  line2  "}],
}

# an OpenAI "tools" list; templates with a tools section render it (transformers
# passes tools= the same way apply_chat_template(tools=...) does)
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city — °C",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. \"Zürich\""},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {"name": "now", "description": "The time",
                                      "parameters": {"type": "object", "properties": {}}}},
]
TOOL_TEMPLATES = {"Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-8B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja"}
TOOL_CONVS = ("user", "sys_user", "multi")


def extract(repo):
    def show(path):
        return subprocess.run(["git", "-C", repo, "show", "HEAD:" + path], check=True,
                              capture_output=True).stdout

    for f, _, _ in TEMPLATES:
        if f[0].isupper() or f.startswith(("meta-", "google-gemma-2", "microsoft-", "deepseek-ai", "mistralai-")):
            with open(os.path.join(OUT, f), "wb") as fp:
                fp.write(show("models/templates/" + f))
    cpp = show("tests/test-chat-template.cpp").decode()
    lit = r'((?:u8)?"(?:[^"\\]|\\.)*")'
    for m in re.finditer(r'/\* \.name= \*/ ' + lit + r',\s*/\* \.template_str= \*/ ' + lit, cpp):
        name = ast.literal_eval(m.group(1).lstrip("u8"))
        if name in FROM_TEST_CPP:
            text = ast.literal_eval(m.group(2)[2:] if m.group(2).startswith("u8") else m.group(2))
            with open(os.path.join(OUT, FROM_TEST_CPP[name]), "w", encoding="utf-8", newline="") as fp:
                fp.write(text)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--from-llama-cpp":
        extract(sys.argv[2])
    import jinja2
    import transformers
    from transformers.utils.chat_template_utils import _compile_jinja_template

    when = datetime.datetime.fromtimestamp(NOW_UNIX, datetime.timezone.utc)
    out = {"transformers": transformers.__version__, "jinja2": jinja2.__version__, "now_unix": NOW_UNIX,
           "conversations": CONVERSATIONS, "tools": TOOLS, "templates": []}
    for f, bos, eos in TEMPLATES:
        with open(os.path.join(OUT, f), encoding="utf-8", newline="") as fp:
            src = fp.read()
        tmpl = _compile_jinja_template(src)
        tmpl.globals["strftime_now"] = lambda fmt: when.strftime(fmt)
        cases = []
        runs = [(conv, None) for conv in CONVERSATIONS]
        if f in TOOL_TEMPLATES:
            runs += [(conv, TOOLS) for conv in TOOL_CONVS]
        runs = [(conv, tools, None) for conv, tools in runs]
        if f in KWARGS_TEMPLATES:
            runs += [(conv, None, KWARGS_TEMPLATES[f]) for conv in KWARGS_CONVS]
        for conv, tools, kwargs in runs:
            msgs = CONVERSATIONS[conv]
            for agp in (True, False):
                case = {"conv": conv, "add_generation_prompt": agp}
                if tools:
                    case["tools"] = True
                if kwargs:
                    case["kwargs"] = kwargs
                try:
                    case["out"] = tmpl.render(messages=msgs, tools=tools, documents=None,
                                              add_generation_prompt=agp, bos_token=bos, eos_token=eos,
                                              **(kwargs or {}))
                except jinja2.exceptions.TemplateError as e:
                    case["error"] = str(e)
                cases.append(case)
        out["templates"].append({"file": f, "bos_token": bos, "eos_token": eos, "cases": cases})
    with open(os.path.join(OUT, "expected.json"), "w", encoding="utf-8") as fp:
        json.dump(out, fp, ensure_ascii=False, indent=1)
        fp.write("\n")


if __name__ == "__main__":
    main()
