#!/usr/bin/env python3
"""ktrace_report.py — read the TSV of the graph-node tracer (tests/gpu/ktrace.c) and
say where the time of one CUDA-graph replay (a decode step) goes, as it really ran:
kernels overlapping under programmatic dependent launch, gaps, idle time.

    python3 tools/ktrace_report.py trace.tsv [--graph ID] [--timeline N] [--skip K] [--layers]

The replays of one graph (by default the graph replayed most often) are lined up by
node; each number is the median over the replays (after the first --skip, default 3,
which warm caches). Per kernel: its duration, and its "exposed" time, the part of
the step's wall it adds past the end of every kernel that started before it (the
exposed times and the idle gaps sum to the step's wall). --timeline N prints the
first N nodes of the median replay in start order. --layers folds the nodes into the
step's repeating period (a decoder layer's kernels) and prints, per position in the
layer, the mean over layers of those medians.
Standard library only.
"""
import argparse
import re
import statistics
import sys
from collections import defaultdict


def short_name(mangled):
    """The kernel's identifier and its integer/bool template arguments, from an
    Itanium-mangled name (enough to tell kernels and instantiations apart)."""
    s = mangled
    if not s.startswith("_Z"):
        return s
    s = s[2:]
    parts = []
    nested = s.startswith("N")
    if nested:
        s = s[1:]
    while s and s[0].isdigit():
        m = re.match(r"(\d+)", s)
        n = int(m.group(1))
        ident = s[len(m.group(1)):len(m.group(1)) + n]
        s = s[len(m.group(1)) + n:]
        if not ident.startswith("_GLOBAL__N"):
            parts.append(ident)
        if not nested:
            break
    name = "::".join(parts) or mangled
    if s.startswith("I"):
        args = re.findall(r"L[a-z](\d+)E", s.split("EEv")[0] + "E")
        args += ["f16" if "kv_f16" in s else "", "fp8" if "kv_fp8" in s else ""]
        args = [a for a in args if a]
        if args:
            name += "<" + ",".join(args) + ">"
    return name


def load(path):
    rows = []
    with open(path) as f:
        head = f.readline()
        if not head.startswith("corr"):
            sys.exit(f"{path}: not a ktrace TSV")
        for line in f:
            c = line.rstrip("\n").split("\t")
            if len(c) < 8:
                continue
            rows.append((int(c[0]), int(c[1]), int(c[2]), int(c[3]), int(c[4]), c[5], c[6], c[7]))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tsv")
    ap.add_argument("--graph", type=int, default=None, help="graph id (default: the most replayed)")
    ap.add_argument("--timeline", type=int, default=0, help="print the first N nodes of a median replay")
    ap.add_argument("--skip", type=int, default=3, help="replays to leave out at the start")
    ap.add_argument("--layers", action="store_true", help="per position in the repeating layer pattern")
    a = ap.parse_args()

    rows = load(a.tsv)
    launches = defaultdict(list)  # (graph, corr) -> kernels
    for r in rows:
        if r[1]:
            launches[(r[1], r[0])].append(r)
    if not launches:
        sys.exit(f"{a.tsv}: no kernel ran inside a CUDA graph")
    per_graph = defaultdict(list)
    for (g, corr), ks in launches.items():
        per_graph[g].append((min(k[3] for k in ks), corr, sorted(ks, key=lambda k: k[3])))
    g = a.graph if a.graph is not None else max(per_graph, key=lambda x: (len(per_graph[x]), len(per_graph[x][0][2])))
    if g not in per_graph:
        sys.exit(f"graph {g}: not in the trace (graphs: {sorted(per_graph)})")
    reps = sorted(per_graph[g])
    n_nodes = statistics.mode(len(r[2]) for r in reps)
    reps = [r for r in reps if len(r[2]) == n_nodes][a.skip:]
    if not reps:
        sys.exit(f"graph {g}: no replay left after --skip {a.skip}")

    walls, busy, gaps_between = [], [], []
    by_node = defaultdict(lambda: {"dur": [], "exp": [], "off": [], "gap": []})
    names = {}
    prev_end = None
    for t0, corr, ks in reps:
        t1 = max(k[4] for k in ks)
        walls.append((t1 - t0) / 1e3)
        if prev_end is not None:
            gaps_between.append((t0 - prev_end) / 1e3)
        prev_end = t1
        reach = t0  # the latest end of the kernels so far
        b = 0
        for k in ks:
            node = k[2]
            names[node] = (short_name(k[7]), k[5], k[6])
            d = by_node[node]
            d["dur"].append((k[4] - k[3]) / 1e3)
            d["off"].append((k[3] - t0) / 1e3)
            d["gap"].append(max(0, k[3] - reach) / 1e3)
            exp = max(0, k[4] - max(k[3], reach))
            d["exp"].append(exp / 1e3)
            b += exp
            reach = max(reach, k[4])
        busy.append(b / 1e3)

    med = statistics.median
    wall = med(walls)
    print(f"graph {g}: {len(reps)} replays of {n_nodes} kernels (after skipping {a.skip})")
    q = statistics.quantiles(walls, n=10) if len(walls) >= 10 else [min(walls)] * 9
    print(f"step wall: median {wall:.1f} us (p10 {q[0]:.1f}, p90 {q[-1]:.1f}); "
          f"GPU busy {med(busy):.1f} us, idle inside the step {wall - med(busy):.1f} us")
    if gaps_between:
        print(f"between replays (end of one to the start of the next): median {med(gaps_between):.1f} us")
    tot_dur = sum(med(d["dur"]) for d in by_node.values())
    print(f"sum of kernel durations {tot_dur:.1f} us ({tot_dur / wall:.2f}x the wall: overlap under PDL)")

    agg = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for node, d in by_node.items():
        e = agg[names[node][0]]
        e[0] += 1
        e[1] += med(d["dur"])
        e[2] += med(d["exp"])
        e[3] += med(d["gap"])
    print()
    print(f"{'kernel':60s} {'n':>4s} {'dur us':>9s} {'each':>7s} {'exposed':>9s} {'% wall':>7s} {'gaps':>7s}")
    for name, (n, dur, exp, gap) in sorted(agg.items(), key=lambda x: -x[1][2]):
        print(f"{name[:60]:60s} {n:4d} {dur:9.1f} {dur / n:7.2f} {exp:9.1f} {100 * exp / wall:6.1f}% {gap:7.1f}")

    if a.layers:
        print_layers(sorted(by_node, key=lambda n: med(by_node[n]["off"])), by_node, names)

    if a.timeline:
        print()
        print(f"first {a.timeline} nodes (medians): start, duration, exposed, idle gap before")
        order = sorted(by_node, key=lambda n: med(by_node[n]["off"]))
        for node in order[:a.timeline]:
            d = by_node[node]
            nm, grid, block = names[node]
            print(f"  {med(d['off']):9.2f} {med(d['dur']):7.2f} {med(d['exp']):7.2f} {med(d['gap']):6.2f}  "
                  f"{nm[:58]} grid {grid} block {block}")


def layer_period(seq):
    """The shortest period p (2..len/3) with which seq repeats over its middle
    (at least 90% of the positions checked agree), or None."""
    n = len(seq)
    for p in range(2, n // 3 + 1):
        lo, hi = n // 6, n - n // 6 - p
        if hi <= lo:
            break
        same = sum(seq[i] == seq[i + p] for i in range(lo, hi))
        if same >= 0.9 * (hi - lo):
            return p
    return None


def print_layers(order, by_node, names):
    med = statistics.median
    seq = [(names[n][0], names[n][1]) for n in order]
    p = layer_period(seq)
    if not p:
        print("\n--layers: no repeating pattern found")
        return
    # the layer as it runs at the middle of the step (a rotation of the decoder layer
    # is fine: each position is one kernel of every layer); every aligned copy of it
    mid = len(seq) // 2
    mid = mid if mid + p <= len(seq) else len(seq) - p
    ref = seq[mid:mid + p]
    start = mid % p
    rows = [[] for _ in range(p)]
    n_layers = 0
    for base in range(start, len(seq) - p + 1, p):
        if seq[base:base + p] != ref:
            continue
        n_layers += 1
        for j in range(p):
            d = by_node[order[base + j]]
            rows[j].append((med(d["dur"]), med(d["exp"])))
    print(f"\nper layer ({n_layers} layers of {p} kernels; means over layers of the medians, us):")
    tot = 0.0
    for j in range(p):
        dur = sum(r[0] for r in rows[j]) / len(rows[j])
        exp = sum(r[1] for r in rows[j]) / len(rows[j])
        tot += exp
        print(f"  {ref[j][0][:56]:56s} grid {ref[j][1]:>10s}  duration {dur:7.2f}  exposed {exp:7.2f}")
    print(f"  {'layer':56s} {'':15s}  {'':16s}  exposed {tot:7.2f}")


if __name__ == "__main__":
    main()
