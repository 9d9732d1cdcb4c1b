#!/usr/bin/env python3
"""One model with symbolic dimensions at several input shapes: qfuse against ONNX Runtime.

    python3 bench/peers/shapes.py MODEL --sets "input_ids=1x16,attention_mask=1x16" \\
        "input_ids=1x128,attention_mask=1x128" [--threads 1 2] [--seconds 2]

qfuse runs every set from one compiled model in one process (`qfuse bench
--shapes`: compiled at the first set, each other compiled from it on first
use); ONNX Runtime (npm onnxruntime-node, graph optimizations on) runs each set
in a process of its own (the model as peers.py gives it to ONNX Runtime). INT64 inputs named like token ids get ids in [1, 511]
and an attention mask with a padded tail; FLOAT inputs uniform [-1, 1]. Prints a
markdown row per set and thread count: ONNX Runtime's median, qfuse's median,
their ratio, and qfuse's compile for that set (the first: import and compile).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402  (the ONNX Runtime runner and its install)


def parse_set(text):
    shapes = {}
    for item in text.split(","):
        name, dims = item.split("=")
        shapes[name] = [int(d) for d in dims.split("x")]
    return shapes


def write_inputs(model, shapes, out_dir, seed):
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = shapes[vi.name]
        if vi.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            if "mask" in vi.name:
                keep = rng.integers(shape[-1] // 2 + 1, shape[-1] + 1, size=shape[:-1])
                x = (np.arange(shape[-1]) < keep[..., None]).astype(np.int64)
            else:
                x = rng.integers(1, 512, size=shape, dtype=np.int64)
        else:
            x = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
        np.save(os.path.join(out_dir, vi.name + ".npy"), x)


def qfuse_sweep(exe, path, sets, threads, seconds):
    """Per set: (compile ms, median ms) from one `qfuse bench --shapes` process."""
    arg = ",".join(",".join(f"{k}={'x'.join(map(str, v))}" for k, v in s.items()) for s in sets)
    out = peers.run([exe, "bench", path, "--threads", str(threads), "--time", str(seconds),
                     "--shapes", arg])
    rows = []
    for line in out.splitlines():
        m = re.match(r"\S+=\S+: (?:import and )?compile ([\d.]+) ms, .* median ([\d.]+) ms", line)
        if m:
            rows.append((float(m.group(1)), float(m.group(2))))
    if len(rows) != len(sets):
        raise RuntimeError("unexpected qfuse bench output:\n" + out)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--sets", nargs="+", required=True)
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--qfuse", default=os.path.join("build", "tools", "qfuse"))
    args = ap.parse_args()
    peers.ensure_ort()
    sets = [parse_set(s) for s in args.sets]
    model = onnx.load(args.model, load_external_data=False)
    print(f"{os.path.basename(args.model)}: qfuse one compiled model for every set, "
          "ONNX Runtime a session per set")
    print("| shapes | threads | ORT ms | qfuse ms | ORT / qfuse | qfuse compile ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as scratch:
        # The model as ONNX Runtime reads it (peers.py: 1-element quantization
        # parameters as scalars, NNCF's FakeQuantize as the QDQ twin).
        ort_path = peers.scalar_qparams(args.model, scratch)
        for t in args.threads:
            rows(args, model, sets, t, ort_path)


def rows(args, model, sets, t, ort_path):
    swept = qfuse_sweep(args.qfuse, args.model, sets, t, args.seconds)
    for k, s in enumerate(sets):
        with tempfile.TemporaryDirectory() as tmp:
            write_inputs(model, s, tmp, seed=k)
            o_ms, _ = peers.ort(ort_path, tmp, os.path.join(tmp, "out"), t, args.seconds)
        c_ms, q_ms = swept[k]
        label = ", ".join(f"{n}={'x'.join(map(str, v))}" for n, v in s.items())
        print(f"| {label} | {t} | {o_ms:.3f} | {q_ms:.3f} | {o_ms / q_ms:.2f}x | {c_ms:.1f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
