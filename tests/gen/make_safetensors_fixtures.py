#!/usr/bin/env python3
"""make_safetensors_fixtures.py - writes tests/data/st/ (committed; CI needs no Python).

Made with the reference writer: safetensors==0.4.5 (safetensors.numpy.save_file),
numpy==1.26.4, xxhash==3.5.0 (pip install safetensors==0.4.5 numpy==1.26.4 xxhash==3.5.0). Run from the repo root.

  tiny/                 one model.safetensors (+ config.json, tokenizer_config.json)
  sharded/              3 shards + model.safetensors.index.json + config.json (gptq)
  sharded.tar|.tar.gz|.zip   the sharded/ folder archived under the prefix "sharded/"
  bad-missing-shard/    index names a shard file that is absent
  bad-missing-tensor/   index maps a tensor to a shard that lacks it
  bad-dup-tensor/       one tensor present in two shards (index maps it to one)
  expected.json         per model dir: tensor -> {dtype, shape, xxh3 (XXH3-64 hex) of the numpy bytes}
The expected hashes come from numpy's arr.tobytes() (C order, little-endian), not from
the reader under test. Output is deterministic (fixed seed, mtime 0 in archives).
"""
import gzip
import io
import json
import os
import shutil
import tarfile
import zipfile

import numpy as np
import xxhash
from safetensors.numpy import save_file

OUT = "tests/data/st"
rng = np.random.default_rng(1234)
expected = {}


def note(model, tensors):
    e = expected.setdefault(model, {})
    dt = {np.float32: "F32", np.float16: "F16", np.float64: "F64", np.int8: "I8", np.uint8: "U8",
          np.int16: "I16", np.int32: "I32", np.int64: "I64", np.bool_: "BOOL", np.uint16: "U16",
          np.uint32: "U32", np.uint64: "U64"}
    for k, a in tensors.items():
        b = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
        e[k] = {"dtype": dt[a.dtype.type], "shape": list(a.shape), "xxh3": xxhash.xxh3_64_hexdigest(b)}


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")


def layer(i):
    return {
        f"model.layers.{i}.self_attn.q_proj.weight": rng.standard_normal((16, 8)).astype(np.float32),
        f"model.layers.{i}.mlp.up_proj.weight": rng.standard_normal((12, 8)).astype(np.float16),
        f"model.layers.{i}.input_layernorm.weight": np.ones(8, np.float32),
    }


shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)

# ---- tiny single-file model: every numpy-expressible dtype, a scalar and an empty tensor
tiny = {
    "f32": rng.standard_normal((4, 8)).astype(np.float32),
    "f16": rng.standard_normal((3, 5)).astype(np.float16),
    "f64": rng.standard_normal(7),
    "i8": rng.integers(-128, 127, (2, 3, 4), dtype=np.int8),
    "u8": rng.integers(0, 255, 9, dtype=np.uint8),
    "i16": rng.integers(-1000, 1000, 6, dtype=np.int16),
    "u16": rng.integers(0, 60000, 6, dtype=np.uint16),
    "i32": rng.integers(-10**9, 10**9, (2, 2), dtype=np.int32),
    "u32": rng.integers(0, 4 * 10**9, 3, dtype=np.uint32),
    "i64": rng.integers(-10**15, 10**15, 3, dtype=np.int64),
    "u64": rng.integers(0, 10**15, 2, dtype=np.uint64),
    "bool": rng.integers(0, 2, 5).astype(np.bool_),
    "scalar": np.array(3.5, np.float32),
    "empty": np.zeros((0, 4), np.float32),
}
os.makedirs(f"{OUT}/tiny")
save_file(tiny, f"{OUT}/tiny/model.safetensors", metadata={"format": "np", "note": "tiny"})
write_json(f"{OUT}/tiny/config.json", {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                      "hidden_size": 8, "num_hidden_layers": 1})
write_json(f"{OUT}/tiny/tokenizer_config.json", {"bos_token": "<s>", "eos_token": "</s>"})
note("tiny", tiny)

# ---- 3-shard model with index
os.makedirs(f"{OUT}/sharded")
weight_map = {}
all_t = {}
shards = [dict(layer(0), **{"model.embed_tokens.weight": rng.standard_normal((32, 8)).astype(np.float32)}),
          layer(1),
          dict(layer(2), **{"lm_head.weight": rng.standard_normal((32, 8)).astype(np.float16),
                            "model.norm.weight": np.ones(8, np.float32)})]
total = 0
for i, t in enumerate(shards):
    fn = f"model-{i + 1:05d}-of-00003.safetensors"
    save_file(t, f"{OUT}/sharded/{fn}", metadata={"format": "pt"})
    for k, a in t.items():
        weight_map[k] = fn
        total += a.nbytes
    all_t.update(t)
write_json(f"{OUT}/sharded/model.safetensors.index.json",
           {"metadata": {"total_size": total}, "weight_map": weight_map})
write_json(f"{OUT}/sharded/config.json", {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
    "num_hidden_layers": 3, "quantization_config": {"quant_method": "gptq", "bits": 4}})
write_json(f"{OUT}/sharded/generation_config.json", {"bos_token_id": 1, "eos_token_id": 2})
note("sharded", all_t)


def members(d, prefix):
    for fn in sorted(os.listdir(d)):
        yield f"{d}/{fn}", f"{prefix}/{fn}"


def add_tar(tf, d, prefix):
    ti = tarfile.TarInfo(prefix)
    ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, 0
    tf.addfile(ti)
    for src, name in members(d, prefix):
        ti = tarfile.TarInfo(name)
        ti.size, ti.mode, ti.mtime = os.path.getsize(src), 0o644, 0
        with open(src, "rb") as f:
            tf.addfile(ti, f)


with tarfile.open(f"{OUT}/sharded.tar", "w", format=tarfile.PAX_FORMAT) as tf:
    add_tar(tf, f"{OUT}/sharded", "sharded")
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
    add_tar(tf, f"{OUT}/sharded", "sharded")
with open(f"{OUT}/sharded.tar.gz", "wb") as f:
    with gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as g:
        g.write(buf.getvalue())
with zipfile.ZipFile(f"{OUT}/sharded.zip", "w", zipfile.ZIP_DEFLATED) as zf:
    for src, name in members(f"{OUT}/sharded", "sharded"):
        zi = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
        zi.compress_type = zipfile.ZIP_DEFLATED
        with open(src, "rb") as f:
            zf.writestr(zi, f.read())


# ---- bad sharded dirs
def bad_dir(name, shard_tensors, wmap):
    d = f"{OUT}/{name}"
    os.makedirs(d)
    for fn, t in shard_tensors.items():
        save_file(t, f"{d}/{fn}")
    write_json(f"{d}/model.safetensors.index.json", {"metadata": {}, "weight_map": wmap})
    write_json(f"{d}/config.json", {"model_type": "llama"})


a = {"a.weight": np.ones(4, np.float32)}
b = {"b.weight": np.zeros(4, np.float32)}
bad_dir("bad-missing-shard", {"s1.safetensors": a},
        {"a.weight": "s1.safetensors", "b.weight": "s2.safetensors"})
bad_dir("bad-missing-tensor", {"s1.safetensors": a, "s2.safetensors": b},
        {"a.weight": "s1.safetensors", "b.weight": "s2.safetensors", "c.weight": "s2.safetensors"})
bad_dir("bad-dup-tensor", {"s1.safetensors": a, "s2.safetensors": dict(b, **a)},
        {"a.weight": "s1.safetensors", "b.weight": "s2.safetensors"})

write_json(f"{OUT}/expected.json", expected)
