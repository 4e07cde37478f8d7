#!/usr/bin/env python3
"""gen_iq_tables.py — write quant/iq_tables.c from llama.cpp's ggml-common.h.

The i-quant grids use 3 to 8 distinct byte values each, so each row is
re-encoded as a uint16 of level indices (8 x 2 bits or 4 x 3 bits) plus a
per-grid level table; quant/iq_tables.h expands rows at decode time.
ksigns_iq2xs is only checked (index + even-parity bit), never emitted.
iq4_nl values are copied; MXFP4 values come from the OCP E2M1 definition.
Fails loudly if a table does not fit or does not expand back exactly.

usage: gen_iq_tables.py PATH/TO/ggml-common.h [-o quant/iq_tables.c]
"""
import argparse
import hashlib
import os
import re
import sys

# name in our tables, name in ggml-common.h, elements per row, bits per element,
# whether the header's bytes are signed
GRIDS = [
    ("iq2xxs", "iq2xxs_grid", 8, 2, False),
    ("iq2xs", "iq2xs_grid", 8, 2, False),
    ("iq2s", "iq2s_grid", 8, 2, False),
    ("iq3xxs", "iq3xxs_grid", 4, 3, False),
    ("iq3s", "iq3s_grid", 4, 3, False),
    ("iq1s", "iq1s_grid", 8, 2, True),
]

TABLE_RE = re.compile(r"GGML_TABLE_BEGIN\(\s*(u?int\d+_t)\s*,\s*(\w+)\s*,\s*(\w+)\s*\)(.*?)GGML_TABLE_END\(\)", re.S)
DEFINE_RE = re.compile(r"^\s*#\s*define\s+(\w+)\s+(\d+)\s*$", re.M)


def die(msg):
    sys.exit(f"gen_iq_tables.py: {msg}")


def parse_tables(text):
    defines = {m.group(1): int(m.group(2)) for m in DEFINE_RE.finditer(text)}
    tables = {}
    for m in TABLE_RE.finditer(text):
        ctype, name, size, body = m.groups()
        size = int(size) if size.isdigit() else defines.get(size)
        if size is None:
            die(f"table {name}: size {m.group(3)} is not a known #define")
        body = re.sub(r"//[^\n]*", "", body)
        vals = [int(v, 0) for v in re.findall(r"-?(?:0x[0-9a-fA-F]+|\d+)", body)]
        if len(vals) != size:
            die(f"table {name}: {len(vals)} values, header says {size}")
        if name in tables:
            continue  # a second definition under another #if branch
        tables[name] = (ctype, vals)
    return tables


def row_bytes(entry, width, signed):
    out = []
    for j in range(width):  # the header's rows are read as bytes of a little-endian word
        b = (entry >> (8 * j)) & 0xFF
        out.append(b - 256 if signed and b >= 128 else b)
    return out


def encode_grid(vals, width, bits, signed, name):
    rows = [row_bytes(v, width, signed) for v in vals]
    levels = sorted({b for r in rows for b in r})
    if len(levels) > (1 << bits):
        die(f"{name}: {len(levels)} distinct values do not fit {bits}-bit indices")
    if any(not -128 <= lv <= 127 for lv in levels):
        die(f"{name}: a level does not fit int8")
    codes = []
    for r in rows:
        c = 0
        for j, b in enumerate(r):
            c |= levels.index(b) << (bits * j)
        codes.append(c)
    # round trip: expanding the codes must give the header's rows back
    for r, c in zip(rows, codes):
        back = [levels[(c >> (bits * j)) & ((1 << bits) - 1)] for j in range(width)]
        if back != r:
            die(f"{name}: round trip failed")
    levels += [0] * ((1 << bits) - len(levels))
    return levels, codes


def check_signs(tables):
    if "ksigns_iq2xs" in tables:
        for i, v in enumerate(tables["ksigns_iq2xs"][1]):
            if v != i | ((bin(i).count("1") & 1) << 7):
                die(f"ksigns_iq2xs[{i}] = {v} is not index + parity bit")
    if "kmask_iq2xs" in tables:
        if tables["kmask_iq2xs"][1] != [1 << j for j in range(8)]:
            die("kmask_iq2xs is not 1 << j")


def find_iq4nl(text, header_path):
    pat = re.compile(r"kvalues_iq4nl[^=]*?(?:\[\s*16\s*\]\s*=\s*\{|16\s*\))(.*?)(?:\}|GGML_TABLE_END)", re.S)
    m = pat.search(text)
    if not m:
        # older trees keep it in ggml-quants.c beside ggml-common.h
        sib = os.path.join(os.path.dirname(header_path), "ggml-quants.c")
        if os.path.exists(sib):
            with open(sib, encoding="utf-8") as f:
                m = pat.search(f.read())
    if not m:
        die("kvalues_iq4nl not found in ggml-common.h nor in a sibling ggml-quants.c")
    vals = [int(v) for v in re.findall(r"-?\d+", m.group(1))]
    if len(vals) != 16:
        die(f"kvalues_iq4nl has {len(vals)} values")
    return vals


def mxfp4_values(text):
    # OCP MX v1.0 E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit; doubled
    # so every value is an integer (the block scale is halved to compensate).
    vals = []
    for c in range(16):
        s, e, m = c >> 3, (c >> 1) & 3, c & 1
        mag2 = m if e == 0 else (2 + m) << (e - 1)
        vals.append(-mag2 if s else mag2)
    m = re.search(r"kvalues_mxfp4[^{]*\{(.*?)\}", text, re.S)
    if m:
        hdr = [int(v) for v in re.findall(r"-?\d+", m.group(1))]
        if hdr != vals:
            die(f"kvalues_mxfp4 in the header {hdr} differs from E2M1 {vals}")
    return vals


def fmt_array(vals, per_line, hexw=None):
    lines = []
    for i in range(0, len(vals), per_line):
        chunk = vals[i:i + per_line]
        if hexw:
            lines.append("\t" + ", ".join(f"0x{v:0{hexw}x}" for v in chunk) + ",")
        else:
            lines.append("\t" + ", ".join(str(v) for v in chunk) + ",")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("header", help="path of llama.cpp's ggml/src/ggml-common.h")
    ap.add_argument("-o", "--output", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "quant", "iq_tables.c"))
    args = ap.parse_args()

    with open(args.header, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8")
    tables = parse_tables(text)
    check_signs(tables)

    out = []
    out.append("/* iq_tables.c — generated by tools/gen_iq_tables.py — do not edit.")
    out.append(" *")
    out.append(" * The i-quant lattice grids re-encoded as level indices (see iq_tables.h for")
    out.append(" * the encoding), plus the iq4_nl and MXFP4 value tables.")
    out.append(f" * Source: llama.cpp ggml-common.h, sha256 {hashlib.sha256(raw).hexdigest()[:16]}...")
    out.append(" * Regenerate: python3 tools/gen_iq_tables.py PATH/TO/ggml-common.h")
    out.append(" */")
    out.append('#include "iq_tables.h"')
    out.append("")
    for ours, theirs, width, bits, signed in GRIDS:
        if theirs not in tables:
            die(f"{theirs} not found in {args.header}")
        levels, codes = encode_grid(tables[theirs][1], width, bits, signed, theirs)
        n = len(codes)
        out.append(f"/* {theirs}: {n} rows of {width}, {bits}-bit level indices */")
        out.append(f"QC_TABLE_BEGIN(int8_t, qc_{ours}_levels, {1 << bits})")
        out.append(fmt_array(levels, 8))
        out.append("QC_TABLE_END()")
        out.append(f"QC_TABLE_BEGIN(uint16_t, qc_{ours}_grid, {n})")
        out.append(fmt_array(codes, 8, hexw=4))
        out.append("QC_TABLE_END()")
        out.append("")
    out.append("/* iq4_nl / iq4_xs non-linear 4-bit values */")
    out.append("QC_TABLE_BEGIN(int8_t, qc_iq4nl_values, 16)")
    out.append(fmt_array(find_iq4nl(text, args.header), 16))
    out.append("QC_TABLE_END()")
    out.append("")
    out.append("/* MXFP4: E2M1 code -> 2 * value */")
    out.append("QC_TABLE_BEGIN(int8_t, qc_mxfp4_values, 16)")
    out.append(fmt_array(mxfp4_values(text), 16))
    out.append("QC_TABLE_END()")

    with open(args.output, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
