#!/usr/bin/env python3
"""Coverage table of a corpus directory: one row per model.

For each MODEL.onnx in CORPUS_DIR, runs `qfuse dump MODEL --summary` and
`qfuse compare MODEL` and prints a Markdown table: layers int8 / total, the
ops left in f32 with the reason the summary gives, and the largest
difference of fused against unfused (in LSB of the output grid, or as an
absolute difference for an output with no grid, e.g. a softmax).

    tools/corpus/report.py build/corpus [--qfuse build/tools/qfuse]
"""

import argparse
import os
import re
import subprocess
import sys


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def summary(qfuse, path):
    _, out = run([qfuse, "dump", path, "--summary"])
    m = re.search(r"^layers: (\d+) of (\d+) int8", out, re.M)
    layers = f"{m.group(1)} / {m.group(2)}" if m else "?"
    left = []
    # Layers left in f32, each followed by its indented reasons; grouped by
    # op and reason, with the ops their inputs come from.
    groups = {}
    block = re.search(r"^layers left in f32:\n((?:  .*\n)+)", out, re.M)
    if block:
        op = None
        for line in block.group(1).splitlines():
            if not line.startswith("      "):
                m = re.search(r"\[(\w+)\]", line)
                op = m.group(1) if m else "?"
                continue
            if op is None:
                continue
            reason = line.strip()
            source = re.search(r"it comes from (?:'[^']*' \((\w+)\)|(a graph input))", reason)
            reason = reason.split(";")[0]
            g = groups.setdefault((op, reason), [0, set()])
            g[0] += 1
            if source:
                g[1].add(source.group(1) or source.group(2))
            op = None
    for (op, reason), (n, sources) in groups.items():
        text = f"{op} x{n}: {reason}"
        if sources:
            text += " (from " + ", ".join(sorted(sources)) + ")"
        left.append(text)
    block = re.search(r"^other ops left in f32, and why:\n((?:  .*\n)+)", out, re.M)
    if block:
        for line in block.group(1).splitlines():
            f = line.split(None, 2)
            if len(f) == 3:
                left.append(f"{f[0]} x{f[1]}: {f[2]}")
    return layers, left


def difference(qfuse, path):
    code, out = run([qfuse, "compare", path])
    lsb = [float(x) for x in re.findall(r"max ([0-9.]+) LSB", out)]
    if lsb:
        return f"{max(lsb):g} LSB"
    absd = [float(x) for x in re.findall(r"max \|diff\| ([0-9.eE+-]+)", out)]
    if absd:
        return f"{max(absd):.3g} abs (no output grid)"
    return f"? (compare exit {code})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus")
    ap.add_argument("--qfuse", default=os.path.join("build", "tools", "qfuse"))
    args = ap.parse_args()
    models = sorted(f for f in os.listdir(args.corpus) if f.endswith(".onnx"))
    if not models:
        sys.exit(f"no .onnx files in {args.corpus}")
    print("| model | layers int8 / total | ops left f32 (why) | fused vs unfused, max |")
    print("| --- | --- | --- | --- |")
    for f in models:
        path = os.path.join(args.corpus, f)
        layers, left = summary(args.qfuse, path)
        diff = difference(args.qfuse, path)
        why = "<br>".join(left) if left else "none"
        print(f"| {f[:-5]} | {layers} | {why} | {diff} |")


if __name__ == "__main__":
    main()
