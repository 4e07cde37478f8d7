"""openai_client.py — qserve through the official openai Python client.

Usage: python openai_client.py BASE_URL API_KEY MODEL EXPECTED_GREEDY_TEXT
Run by tests/test_qserve_openai.c against a live server (stories260K, chat template chatml).
EXPECTED_GREEDY_TEXT: the 32 greedy tokens after "Once upon a time" as llama.cpp
chose them (reference ids), rendered through the vocabulary by the C test.
Prints "openai_client: N passed, N failed"; exit status 1 on any failure.
"""
import sys

import openai

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL openai_client:", what, file=sys.stderr)


def main():
    base, key, model, expect = sys.argv[1:5]
    c = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=60)

    ids = [m.id for m in c.models.list().data]
    check(ids == [model], "models.list: %r" % ids)

    greedy = dict(model=model, prompt="Once upon a time", max_tokens=32, temperature=0,
                  extra_body={"ignore_eos": True})
    r = c.completions.create(**greedy)
    check(r.choices[0].text == expect, "greedy text %r != %r" % (r.choices[0].text, expect))
    check(r.choices[0].finish_reason == "length", "finish_reason %r" % r.choices[0].finish_reason)
    check(r.usage.prompt_tokens == 5 and r.usage.completion_tokens == 32, "usage %r" % r.usage)

    parts, usage, last_finish = [], None, None
    for ch in c.completions.create(stream=True, stream_options={"include_usage": True}, **greedy):
        if ch.choices:
            parts.append(ch.choices[0].text)
            last_finish = ch.choices[0].finish_reason or last_finish
        if ch.usage:
            usage = ch.usage
    check("".join(parts) == expect, "streamed greedy text %r" % "".join(parts))
    check(last_finish == "length", "streamed finish_reason %r" % last_finish)
    check(usage is not None and usage.completion_tokens == 32, "streamed usage %r" % usage)

    # stop string: the text before its first occurrence, finish_reason "stop"
    stop = " girl"
    r = c.completions.create(stop=[stop], **greedy)
    check(r.choices[0].text == expect[:expect.index(stop)], "stop text %r" % r.choices[0].text)
    check(r.choices[0].finish_reason == "stop", "stop finish_reason %r" % r.choices[0].finish_reason)
    s = "".join(ch.choices[0].text for ch in c.completions.create(stop=[stop], stream=True, **greedy))
    check(s == expect[:expect.index(stop)], "streamed stop text %r" % s)

    # seed reproducibility at temperature > 0
    sampled = dict(model=model, prompt="Once upon a time", max_tokens=24, temperature=1.0,
                   extra_body={"ignore_eos": True})
    a = c.completions.create(seed=1234, **sampled).choices[0].text
    b = c.completions.create(seed=1234, **sampled).choices[0].text
    d = c.completions.create(seed=99, **sampled).choices[0].text
    check(a == b, "same seed, different text: %r vs %r" % (a, b))
    check(a != d, "different seeds, same text %r" % a)

    # n=2: two choices, indices 0 and 1; greedy both are llama.cpp's text, sampled
    # choice i is the n=1 request with seed + i (docs/serve.md), streamed by index
    r = c.completions.create(n=2, **greedy)
    check(sorted(x.index for x in r.choices) == [0, 1], "n=2 indices %r" % [x.index for x in r.choices])
    check(all(x.text == expect and x.finish_reason == "length" for x in r.choices),
          "n=2 greedy texts %r" % [x.text for x in r.choices])
    check(r.usage.prompt_tokens == 5 and r.usage.completion_tokens == 64, "n=2 usage %r" % r.usage)
    r = c.completions.create(n=2, seed=1234, **sampled)
    by = {x.index: x.text for x in r.choices}
    one = c.completions.create(seed=1235, **sampled).choices[0].text
    check(sorted(by) == [0, 1] and by[0] == a and by[1] == one,
          "n=2 seed 1234: %r, want [%r, %r]" % (by, a, one))
    parts = {}
    for ch in c.completions.create(n=2, seed=1234, stream=True, **sampled):
        for x in ch.choices:
            parts[x.index] = parts.get(x.index, "") + x.text
    check(parts == by, "n=2 streamed %r != %r" % (parts, by))

    # chat, plain and streamed, with logprobs
    msgs = [{"role": "system", "content": "You tell stories."},
            {"role": "user", "content": "Tell me about a cat."}]
    r = c.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0,
                                  logprobs=True, top_logprobs=3)
    ch = r.choices[0]
    check(ch.message.role == "assistant" and isinstance(ch.message.content, str), "chat message %r" % ch.message)
    check(ch.finish_reason in ("stop", "length"), "chat finish_reason %r" % ch.finish_reason)
    lp = ch.logprobs.content if ch.logprobs else []
    check(len(lp) == r.usage.completion_tokens, "chat logprobs: %d entries for %d tokens" % (len(lp), r.usage.completion_tokens))
    check(all(len(t.top_logprobs) == 3 and t.logprob <= 0 for t in lp), "chat top_logprobs shape")
    check(all(t.top_logprobs[0].logprob >= t.logprob - 1e-6 for t in lp), "greedy token is not the top alternative")
    streamed = "".join(x.choices[0].delta.content or "" for x in
                       c.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0, stream=True)
                       if x.choices)
    check(streamed == ch.message.content, "streamed chat %r != %r" % (streamed, ch.message.content))

    # issue 17 fields: logit_bias (ids read back as "token_id:N"), echo, stop_token_ids
    # and min_tokens through extra_body, response_format text, models.retrieve
    def lp_ids(r):
        return [int(t.split(":")[1]) for t in r.choices[0].logprobs.tokens]
    ids4 = dict(model=model, prompt="Once upon a time", max_tokens=4, temperature=0, logprobs=0,
                extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True})
    first = lp_ids(c.completions.create(**ids4))
    r = c.completions.create(logit_bias={str(first[0]): -100}, **ids4)
    check(len(lp_ids(r)) == 4 and first[0] not in lp_ids(r), "logit_bias -100 on %d: %r" % (first[0], lp_ids(r)))
    r = c.completions.create(logit_bias={str(first[2]): 100}, **ids4)
    check(lp_ids(r) == [first[2]] * 4, "logit_bias +100 on %d: %r" % (first[2], lp_ids(r)))
    r = c.chat.completions.create(model=model, messages=msgs, max_tokens=3, temperature=0,
                                  logit_bias={str(first[2]): 100}, response_format={"type": "text"})
    check(r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3, "chat logit_bias %r" % r)
    plain = c.completions.create(model=model, prompt="Once upon a time", max_tokens=4, temperature=0)
    r = c.completions.create(model=model, prompt="Once upon a time", max_tokens=4, temperature=0, echo=True)
    check(r.choices[0].text == "Once upon a time" + plain.choices[0].text, "echo %r" % r.choices[0].text)
    r = c.completions.create(model=model, prompt="Once upon a time", max_tokens=16, temperature=0,
                             extra_body={"ignore_eos": True, "stop_token_ids": [first[3]]})
    check(r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 4, "stop_token_ids %r" % r)
    r = c.completions.create(extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True,
                                         "stop_token_ids": [first[3]], "min_tokens": 4},
                             **{k: v for k, v in ids4.items() if k != "extra_body"})
    check(lp_ids(r)[:3] == first[:3] and first[3] not in lp_ids(r), "min_tokens %r" % lp_ids(r))
    r = c.chat.completions.create(model=model, messages=msgs, max_tokens=3, temperature=0,
                                  extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    check(r.usage.completion_tokens == 3 or r.choices[0].finish_reason == "stop", "chat_template_kwargs %r" % r)
    try:
        c.chat.completions.create(model=model, messages=msgs, max_tokens=1,
                                  extra_body={"chat_template_kwargs": {"messages": []}})
        check(False, "chat_template_kwargs.messages accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "chat_template_kwargs.messages" in str(e), "chat_template_kwargs: %s" % e)
    check(c.models.retrieve(model).id == model, "models.retrieve")
    try:
        c.models.retrieve("no-such-model")
        check(False, "models.retrieve of an unknown id succeeded")
    except openai.NotFoundError as e:
        check(e.status_code == 404, "models.retrieve unknown: %s" % e)
    for kw, field in ((dict(logit_bias={"999999": 5}), "logit_bias"),
                      (dict(response_format={"type": "json_object"}), "response_format")):
        try:
            c.chat.completions.create(model=model, messages=msgs, max_tokens=1, **kw)
            check(False, "%s accepted" % field)
        except openai.BadRequestError as e:
            check(e.status_code == 400 and field in str(e), "%s error: %s" % (field, e))

    # errors come back as the client's typed exceptions
    try:
        c.completions.create(model=model, prompt="x", max_tokens=-1)
        check(False, "max_tokens -1 accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "max_tokens" in str(e), "max_tokens error: %s" % e)
    try:
        c.completions.create(model="no-such-model", prompt="x", max_tokens=1)
        check(False, "unknown model accepted")
    except openai.NotFoundError as e:
        check(e.status_code == 404, "unknown model: %s" % e)
    bad = openai.OpenAI(base_url=base, api_key="wrong", max_retries=0)
    try:
        bad.completions.create(model=model, prompt="x", max_tokens=1)
        check(False, "wrong key accepted")
    except openai.AuthenticationError as e:
        check(e.status_code == 401, "wrong key: %s" % e)

    print("openai_client: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
