#!/usr/bin/env python3
"""make_hf_llamacpp_ref.py - writes tests/data/hf/<model>.llamacpp.json (committed).

What llama.cpp's own converter makes of each model in tests/data/hf/: runs
convert_hf_to_gguf.py of llama.cpp c392e509 (with its gguf-py) with --outtype f32 and
its vocabulary step switched off (it cannot name our cut-down BPE tokenizers: it
recognizes pre-tokenizers by hashing their output on a fixed text, and those hashes
are of full vocabularies; the tokenizer has its own test), reads the GGUF back with
gguf-py's GGUFReader and records, per tensor, the ggml shape and the XXH3-64 of its
values as little-endian float32 (ne[0] fastest), and the <arch>.* keys. Qwen3 and
Qwen3-MoE are not in that llama.cpp version and get no file.
Needs: the venv of requirements-hf.txt plus xxhash==3.5.0; llama.cpp c392e509's
convert_hf_to_gguf.py and gguf-py/ in LLAMA_CPP (default /tmp/llcv), e.g.
  git -C LLAMA_CPP_REPO archive c392e509 convert_hf_to_gguf.py gguf-py | tar x -C /tmp/llcv
`sentencepiece` may be absent (a stub is put on the path; it is never called).
Run from the repo root:  python tests/gen/make_hf_llamacpp_ref.py
"""
import json
import os
import subprocess
import sys
import tarfile
import tempfile

import numpy as np
import xxhash

LL = os.environ.get("LLAMA_CPP", "/tmp/llcv")
OUT = "tests/data/hf"
MODELS = ["llama", "llama-bias", "llama-tied", "mistral", "qwen2", "mixtral.tar.gz", "qwen2-moe"]

RUNNER = """
import sys
sys.path[:0] = [%r, %r, %r]
import convert_hf_to_gguf as c
for n in ('set_vocab', '_set_vocab_gpt2', '_set_vocab_sentencepiece', '_set_vocab_llama_hf', '_set_vocab_qwen'):
    setattr(c.Model, n, lambda self: None)
sys.argv = ['convert_hf_to_gguf.py', sys.argv[1], '--outfile', sys.argv[2], '--outtype', 'f32']
c.main()
"""


def field_value(f):
    from gguf import GGUFValueType
    t = f.types[0]
    if t == GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    if t == GGUFValueType.ARRAY:
        return [x.item() if hasattr(x, "item") else x for i in f.data for x in f.parts[i]]
    v = f.parts[f.data[0]][0]
    return v.item()


def main():
    tmp = tempfile.mkdtemp()
    stub = os.path.join(tmp, "stub")
    os.makedirs(stub)
    with open(os.path.join(stub, "sentencepiece.py"), "w") as f:
        f.write("class SentencePieceProcessor: pass\n")
    runner = os.path.join(tmp, "run.py")
    with open(runner, "w") as f:
        f.write(RUNNER % (stub, os.path.join(LL, "gguf-py"), LL))
    sys.path[:0] = [stub, os.path.join(LL, "gguf-py")]
    from gguf import GGUFReader
    for m in MODELS:
        src = os.path.join(OUT, m)
        name = m.replace(".tar.gz", "")
        if m.endswith(".tar.gz"):
            with tarfile.open(src) as tf:
                tf.extractall(tmp)
            src = os.path.join(tmp, name)
        out = os.path.join(tmp, name + ".gguf")
        subprocess.run([sys.executable, runner, src, out], check=True, capture_output=True)
        r = GGUFReader(out)
        arch = field_value(r.fields["general.architecture"])
        kv = {k: field_value(f) for k, f in r.fields.items() if k.startswith(arch + ".") or k == "general.architecture"}
        tensors = {}
        for t in r.tensors:
            vals = np.ascontiguousarray(t.data, dtype="<f4")
            tensors[t.name] = {"ne": [int(x) for x in t.shape], "xxh3_f32": xxhash.xxh3_64_hexdigest(vals.tobytes())}
        ref = {"llama_cpp": "c392e509 convert_hf_to_gguf.py --outtype f32 (vocabulary step off)", "kv": kv,
               "tensors": tensors}
        with open(os.path.join(OUT, name + ".llamacpp.json"), "w") as f:
            json.dump(ref, f, indent=1, sort_keys=True)
        print(name, len(tensors), "tensors,", len(kv), "keys")


if __name__ == "__main__":
    main()
