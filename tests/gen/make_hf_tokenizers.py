#!/usr/bin/env python3
"""make_hf_tokenizers.py - writes tests/data/hf/tok/NAME.tokenizer.json.xz (committed).

Full-size Hugging Face tokenizer.json files, built with the `tokenizers` library
(tests/gen/requirements-hf.txt) from llama.cpp's vocabulary GGUFs in the shared
fixtures, the way transformers exports each family:
  llama-spm  SentencePiece as BPE + byte_fallback, Prepend/Replace "\u2581" normalizer,
             merges from the piece scores (transformers SpmConverter's rule)
  gpt-2      byte-level BPE, ByteLevel pre-tokenizer with its own regex
  starcoder  Digits(individual) + ByteLevel
  llama-bpe  Llama 3: Split(its regex) + ByteLevel(use_regex=False), ignore_merges
Each file is only written after the `tokenizers` library itself reproduces
llama.cpp's test vectors X.gguf.inp -> X.gguf.out (ids, no BOS) with it, so the C
test (tests/test_hf_tokenizer.c) checks our conversion against ids that both the HF library
and llama.cpp agree on. Run from the repo root:
  python tests/gen/make_hf_tokenizers.py [FIXTURES]
"""
import lzma
import os
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

sys.path.insert(0, os.path.dirname(__file__))
from make_hf_models import LLAMA3_RE, gguf_kv, spm_merges  # noqa: E402

FIX = sys.argv[1] if len(sys.argv) > 1 else "../shared/fixtures"
OUT = "tests/data/hf/tok"


def vectors(name):
    base = os.path.join(FIX, "vocab", "ggml-vocab-%s.gguf" % name)
    inp = open(base + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")[:-1]
    out = [[int(x) for x in line.split()] for line in open(base + ".out", encoding="utf-8").read().split("\n")[:len(inp)]]
    return inp, out


def spm(kv):
    toks, scores, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.scores"], kv["tokenizer.ggml.token_type"]
    vocab = {t: i for i, t in enumerate(toks)}
    merge_scores = {t: scores[i] for i, t in enumerate(toks) if types[i] == 1}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=spm_merges(vocab, merge_scores), unk_token=toks[0],
                              byte_fallback=True, fuse_unk=True))
    tk.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tk.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(" ", 1, 0)])
    tk.add_special_tokens([AddedToken(toks[i], normalized=False, special=True) for i in range(len(toks)) if types[i] == 3])
    return tk


def bytelevel(kv, kind):
    toks, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
    vocab = {t: i for i, t in enumerate(toks)}
    merges = [tuple(m.split(" ", 1)) for m in kv["tokenizer.ggml.merges"]]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=kind == "llama3"))
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if kind == "digits":
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), bl])
    elif kind == "llama3":
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tk.pre_tokenizer = bl
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(toks[i], normalized=False, special=True) for i in range(len(toks)) if types[i] == 3])
    return tk


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, make in [("llama-spm", spm), ("gpt-2", lambda kv: bytelevel(kv, "plain")),
                       ("starcoder", lambda kv: bytelevel(kv, "digits")),
                       ("llama-bpe", lambda kv: bytelevel(kv, "llama3"))]:
        kv = gguf_kv(os.path.join(FIX, "vocab", "ggml-vocab-%s.gguf" % name))
        tk = make(kv)
        inp, out = vectors(name)
        bad = [(s, tk.encode(s, add_special_tokens=False).ids, o) for s, o in zip(inp, out)
               if tk.encode(s, add_special_tokens=False).ids != o]
        if bad:
            print("%s: %d of %d vectors differ; not written. First: %r" % (name, len(bad), len(inp), bad[0]))
            continue
        path = os.path.join(OUT, name + ".tokenizer.json.xz")
        with open(path, "wb") as f:  # xz: ~30% smaller than gzip; deterministic (no timestamps)
            f.write(lzma.compress(tk.to_str().encode("utf-8"), preset=9 | lzma.PRESET_EXTREME))
        print("%s: %d vectors reproduced by tokenizers; wrote %s (%d bytes)" % (name, len(inp), path,
                                                                               os.path.getsize(path)))


if __name__ == "__main__":
    main()
