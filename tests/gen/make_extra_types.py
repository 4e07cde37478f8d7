#!/usr/bin/env python3
"""make_extra_types.py — write tests/data/extra-types.{gguf,json}.

Types with no llama.cpp-written fixture (mxfp4, q8_1, q8_K, f64, i8..i64): a
few small tensors each, random but valid blocks (fixed seed), written with
gguf-py 0.19.0. Expected float32 values come from gguf-py's own numpy
dequantizer where it has one (mxfp4), else from the published formula in
numpy; each tensor's "expected_by" says which. Never from qconvert's C code.
gguf-py 0.19.0 lists q8_1 as 40 bytes (old float layout); ggml's block_q8_1
is 36 (two fp16 + 32 quants), so that entry is overridden in-process.

usage: python3 tests/gen/make_extra_types.py [OUT_DIR]   (default tests/data)
"""
import json
import os
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

GGUF_PY_VERSION = "0.19.0"
SEED = 20250301
REL_FILE = "tests/data/extra-types.gguf"


def check_version():
    try:
        from importlib.metadata import version
        v = version("gguf")
    except Exception:  # noqa: BLE001 - any failure means we cannot vouch for it
        v = "unknown"
    if v != GGUF_PY_VERSION:
        sys.exit(f"make_extra_types.py: needs gguf=={GGUF_PY_VERSION} (pip install gguf=={GGUF_PY_VERSION}), found {v}")


def f16_bytes(x):
    return np.asarray(x, dtype=np.float16).view(np.uint8)


# ---- block builders: (raw bytes as uint8 array (rows, row_bytes), expected float32, how) ----

def mxfp4_from_floats(rng, rows, cols):
    x = (rng.standard_normal((rows, cols)) * 0.5).astype(np.float32)
    q = gguf.quants.quantize(x, T.MXFP4)
    return q, gguf.quants.dequantize(q, T.MXFP4), "gguf.quants.dequantize (gguf-py 0.19.0)"


def mxfp4_edges(rng, rows, cols):
    nb = rows * cols // 32
    # exponents at the edges (0 and 1 decode to binary32 subnormal scales) and
    # up to 252, the largest whose values (<= 12 * 2^124) stay finite
    e = np.array([0, 1, 2, 127, 128, 120, 135, 252] + list(rng.integers(110, 140, nb)), dtype=np.uint8)[:nb]
    qs = rng.integers(0, 256, (nb, 16), dtype=np.uint8)
    q = np.concatenate([e.reshape(nb, 1), qs], axis=1).reshape(rows, -1)
    return q, gguf.quants.dequantize(q, T.MXFP4), "gguf.quants.dequantize (gguf-py 0.19.0)"


def q8_1_blocks(rng, rows, cols):
    nb = rows * cols // 32
    qs = rng.integers(-127, 128, (nb, 32), dtype=np.int8)
    d = (rng.uniform(1e-4, 2e-2, nb)).astype(np.float16)
    s = (d.astype(np.float32) * qs.astype(np.int32).sum(axis=1).astype(np.float32)).astype(np.float16)
    raw = np.concatenate([f16_bytes(d).reshape(nb, 2), f16_bytes(s).reshape(nb, 2), qs.view(np.uint8)], axis=1)
    y = qs.astype(np.float32) * d.astype(np.float32).reshape(nb, 1)
    return raw.reshape(rows, -1), y, "numpy formula: float32(qs) * float32(fp16 d); s ignored"


def q8_k_blocks(rng, rows, cols):
    nb = rows * cols // 256
    qs = rng.integers(-128, 128, (nb, 256), dtype=np.int8)
    d = rng.uniform(1e-5, 1e-2, nb).astype(np.float32)
    bsums = qs.reshape(nb, 16, 16).astype(np.int16).sum(axis=2, dtype=np.int16)
    raw = np.concatenate([d.view(np.uint8).reshape(nb, 4), qs.view(np.uint8), bsums.view(np.uint8).reshape(nb, 32)], axis=1)
    y = d.reshape(nb, 1) * qs.astype(np.float32)
    return raw.reshape(rows, -1), y, "numpy formula: float32 d * float32(qs); bsums ignored"


def f64_values(rng, rows, cols):
    edge = [0.0, -0.0, 1.0, 1.0 + 2.0 ** -24, 1.0 + 3 * 2.0 ** -24, 1.0 / 3.0, -2.5e-39, 1e-45,
            3.4e38, -3.4028234663852886e38, 6.103515625e-05, np.pi]
    x = rng.standard_normal(rows * cols) * 10.0
    x[:len(edge)] = edge
    x = x.reshape(rows, cols)
    return x, x.astype(np.float32), "numpy formula: float64 -> float32 cast (round to nearest even)"


def int_values(dtype, extra):
    def build(rng, rows, cols):
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, rows * cols, dtype=dtype, endpoint=True)
        x[:len(extra)] = np.array(extra, dtype=dtype)
        x = x.reshape(rows, cols)
        return x, x.astype(np.float32), "numpy formula: integer -> float32 cast (round to nearest even)"
    return build


def exact_rne_f32(v):
    """float32 nearest to the integer v, ties to even, by integer arithmetic."""
    if v == 0:
        return 0.0
    s, a = (-1 if v < 0 else 1), abs(v)
    shift = max(a.bit_length() - 24, 0)
    q, r = a >> shift, a & ((1 << shift) - 1)
    half = 1 << (shift - 1) if shift else 0
    if shift and (r > half or (r == half and q & 1)):
        q += 1
    return float(s * (q << shift))


I64_EDGES = [0, -1, 2 ** 24 + 1, 2 ** 24 + 3, -(2 ** 25 + 2), 2 ** 53 + 1, 2 ** 63 - 1, -2 ** 63,
             (2 ** 40 + 1) << 20, 0x7FFFFF8000000000 - 1]

SPECS = [
    # name, type, builder, numpy shape (rows, cols) -> ggml ne = [cols, rows]
    ("mxfp4.random", T.MXFP4, mxfp4_from_floats, (3, 64)),
    ("mxfp4.edges", T.MXFP4, mxfp4_edges, (2, 128)),
    ("q8_1.a", T.Q8_1, q8_1_blocks, (2, 64)),
    ("q8_1.b", T.Q8_1, q8_1_blocks, (1, 96)),
    ("q8_K.a", T.Q8_K, q8_k_blocks, (2, 256)),
    ("f64.a", T.F64, f64_values, (4, 16)),
    ("i8.all", T.I8, int_values(np.int8, list(range(-128, 128))), (4, 64)),
    ("i16.a", T.I16, int_values(np.int16, [-32768, 32767, 0, -1]), (2, 32)),
    ("i32.a", T.I32, int_values(np.int32, [-2 ** 31, 2 ** 31 - 1, 2 ** 24 + 1, 2 ** 24 + 3, -(2 ** 25 + 6)]), (2, 32)),
    ("i64.a", T.I64, int_values(np.int64, I64_EDGES), (2, 16)),
]

NAMES = {T.MXFP4: "mxfp4", T.Q8_1: "q8_1", T.Q8_K: "q8_K", T.F64: "f64",
         T.I8: "i8", T.I16: "i16", T.I32: "i32", T.I64: "i64"}


def main():
    check_version()
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
    GGML_QUANT_SIZES[T.Q8_1] = (32, 36)  # see module docstring

    rng = np.random.default_rng(SEED)
    w = gguf.GGUFWriter(os.path.join(out_dir, "extra-types.gguf"), "qc-extra-types")
    w.add_name("qconvert extra-types fixture")
    w.add_uint32("qconvert.fixture.seed", SEED)
    entries = []
    for name, qtype, build, (rows, cols) in SPECS:
        data, expected, how = build(rng, rows, cols)
        expected = np.asarray(expected, dtype=np.float32).reshape(-1)
        if not np.all(np.isfinite(expected)):
            sys.exit(f"{name}: non-finite expected value (JSON cannot hold it)")
        if qtype == T.I64:  # numpy's cast must agree with exact RNE of the integer
            ref = [exact_rne_f32(int(v)) for v in data.reshape(-1)]
            if [float(v) for v in expected] != ref:
                sys.exit("i64: numpy's float32 cast is not round-to-nearest-even here")
        if data.dtype == np.uint8:
            w.add_tensor(name, data, raw_dtype=qtype)
        else:
            w.add_tensor(name, data)
        entries.append({"name": name, "type": NAMES[qtype], "ne": [cols, rows], "expected_by": how,
                        "values": [float(v) for v in expected]})
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    doc = {"file": REL_FILE,
           "made_by": f"gguf-py {GGUF_PY_VERSION} via tests/gen/make_extra_types.py, numpy seed {SEED}",
           "note": "values are the exact float32 results in tensor order (ne[0] fastest); "
                   "q8_1 blocks are 36 bytes (ggml), not gguf-py 0.19.0's 40",
           "tensors": entries}
    with open(os.path.join(out_dir, "extra-types.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
