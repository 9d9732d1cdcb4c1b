"""ONNX's weight codes, computed with numpy: an independent reference for qfuse.

A model that quantizes f32 weights in the file (QuantizeLinear on an
initializer, then DequantizeLinear: PyTorch's QAT export) leaves the codes to
the runtime. ONNX defines them as saturate(round_half_to_even(w / s) + zp), the
division in float32. For every such pair this writes, under
<OUT>/<model>.weight_codes/:
  <k>.codes.npy   int32: the codes minus the zero point (the s8 weights a layer reads)
  <k>.dq.npy      float32: DequantizeLinear's output, (q - zp) * s in float32
  index.tsv       k, the initializer's name, the DequantizeLinear output's name
and returns how many weights sit exactly on a rounding tie (w / s = n + 0.5).
"""

import os
import shutil

import numpy as np
import onnx
from onnx import numpy_helper

_RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def _constants(model):
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    values[n.output[0]] = numpy_helper.to_array(a.t)
        elif n.op_type == "Identity" and n.input[0] in values:
            values[n.output[0]] = values[n.input[0]]
    return values


def _along(v, axis, rank):
    """A per-axis parameter shaped to broadcast along `axis` of a rank-`rank` tensor."""
    if v.size == 1:
        return v.reshape(())
    shape = [1] * rank
    shape[axis] = v.size
    return v.reshape(shape)


def weight_codes(model):
    """(initializer, dq_output, codes - zp as int32, dq as float32, ties) per weight pair."""
    consts = _constants(model)
    readers = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    out = []
    for n in model.graph.node:
        if n.op_type != "QuantizeLinear" or n.input[0] not in consts:
            continue
        w = consts[n.input[0]]
        if w.dtype != np.float32:
            continue
        dqs = [r for r in readers.get(n.output[0], []) if r.op_type == "DequantizeLinear"]
        if not dqs:
            continue
        s = consts[n.input[1]].astype(np.float32)
        zp = consts[n.input[2]] if len(n.input) > 2 and n.input[2] else np.zeros((), np.uint8)
        lo, hi = _RANGES[zp.dtype]
        axis = next((a.i for a in n.attribute if a.name == "axis"), 1) % max(w.ndim, 1)
        sb = _along(s, axis, w.ndim)
        zb = _along(zp.astype(np.int32), axis, w.ndim)
        quotient = w / sb  # float32 / float32: the division in float32
        assert quotient.dtype == np.float32
        q = np.clip(np.rint(quotient).astype(np.int64) + zb, lo, hi)
        codes = (q - zb).astype(np.int32)
        dq = (codes.astype(np.float32) * sb).astype(np.float32)
        ties = int(np.count_nonzero(np.abs(quotient - np.floor(quotient)) == 0.5))
        for dq_node in dqs:
            out.append((n.input[0], dq_node.output[0], codes, dq, ties))
    return out


def write(model_path, out_dir):
    """Writes <out_dir>/<model>.weight_codes/ (removed when the model has no such pair)."""
    stem = os.path.splitext(os.path.basename(model_path))[0]
    target = os.path.join(out_dir, stem + ".weight_codes")
    entries = weight_codes(onnx.load(model_path))
    if os.path.isdir(target):
        shutil.rmtree(target)
    if not entries:
        return None
    os.makedirs(target)
    ties = 0
    with open(os.path.join(target, "index.tsv"), "w") as index:
        for k, (init, dq_name, codes, dq, t) in enumerate(entries):
            np.save(os.path.join(target, f"{k}.codes.npy"), codes)
            np.save(os.path.join(target, f"{k}.dq.npy"), dq)
            index.write(f"{k}\t{init}\t{dq_name}\n")
            ties += t
    return len(entries), sum(c.size for _, _, c, _, _ in entries), ties
