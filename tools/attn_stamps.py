#!/usr/bin/env python3
"""tools/attn_stamps.py — where the split-K decode attention's time goes, from the
table a qrun built by tools/attn_stamps.sh writes ($QC_ATTN_STAMPS): per phase the
median over layers and blocks of the time since the block's entry (ns), and of
each phase's own length. Columns of the table: layer, block, then 10 stamps
relative to the entry (-1: not reached), then the entry's absolute time."""
import statistics
import sys

NAMES = ["entry", "pre-wait", "after wait", "q staged", "own row stored", "scores", "softmax", "P V",
         "partials counted", "merge done"]


def main():
    rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
    print(f"{len(rows)} blocks over {len({r[0] for r in rows})} layers")
    prev = None
    for i, name in enumerate(NAMES):
        vals = [int(r[2 + i]) for r in rows if int(r[2 + i]) >= 0]
        if not vals:
            continue
        line = f"{name:18s} at {statistics.median(vals) / 1000:8.2f} us (n {len(vals)})"
        if prev is not None:
            d = [int(r[2 + i]) - int(r[2 + prev]) for r in rows if int(r[2 + i]) >= 0 and int(r[2 + prev]) >= 0]
            if d:
                line += f"   phase {statistics.median(d) / 1000:7.2f} us (p90 {sorted(d)[int(0.9 * (len(d) - 1))] / 1000:.2f})"
        print(line)
        prev = i
    # per layer: spread of the wait's release and of the last partials across blocks
    by = {}
    for r in rows:
        by.setdefault(r[0], []).append(r)
    rel, span = [], []
    for l, rs in by.items():
        t0 = min(int(r[-1]) for r in rs)
        w = [int(r[-1]) - t0 + int(r[4]) for r in rs if int(r[4]) >= 0]
        e = [int(r[-1]) - t0 + int(r[11]) for r in rs if int(r[11]) >= 0]
        p = [int(r[-1]) - t0 + int(r[10]) for r in rs if int(r[10]) >= 0]
        if w and e:
            rel.append((max(w) - min(w)) / 1000)
            span.append((max(e) - min(w)) / 1000)
    if rel:
        print(f"per layer: the wait's release spread over blocks {statistics.median(rel):.2f} us; "
              f"first release to the merge's end {statistics.median(span):.2f} us")


if __name__ == "__main__":
    main()
