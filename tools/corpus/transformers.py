"""Transformer encoders for the corpus, quantized in ONNX Runtime's two formats.

The float encoders are PyTorch exports (tools/corpus/torch_encoders.py, committed
under tools/corpus/encoders/). This module binds their sequence length, runs them
with a numpy interpreter of the operators they use (min/max calibration on
generated token sequences with padded tails), and writes, per encoder and
sequence length, into OUT/transformers/:
  <name>_s<L>_f32.onnx   the float model at that length
  <name>_s<L>_qdq.onnx   static QDQ as ONNX Runtime's quantize_static writes it:
                         a u8 asymmetric QuantizeLinear -> DequantizeLinear on every
                         activation a MatMul or Gemm reads (the activation-by-
                         activation MatMuls of attention included: Q, K^T, the
                         Softmax output, V), s8 symmetric per-channel weights
                         (axis 1 of a MatMul's [K, N] weights, 0 of Gemm's
                         transposed ones), biases left as the f32 Adds they are;
  <name>_s<L>_dyn.onnx   dynamic, as quantize_dynamic writes it: every MatMul with
                         constant weights becomes DynamicQuantizeLinear(A) ->
                         MatMulInteger(A_q, B_q, A_zp, B_zp) -> Cast(float) ->
                         Mul(A_scale * B_scale), s8 per-tensor weights, the bias Add
                         after it as it was; the embedding tables s8 per-tensor codes
                         read by Gather, then DequantizeLinear (ORT's GatherQuant);
and into OUT/symbolic/ <name>_sym_<form>.onnx, the same three with the batch
and sequence left symbolic as the export wrote them (quantized with the ranges
calibrated at the longest length), for serving every shape from one compiled
model;
and for each bound model, one input set and the numpy interpreter's output on it
(<model>.input_ids.npy, <model>.attention_mask.npy, <model>.logits.npy for the
float model), an independent reference for qfuse's import of these operators.
"""

import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
SEQUENCE_LENGTHS = (16, 64)
VOCAB = 512

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def run(model, feeds):
    """Every tensor of the float model for `feeds` (floats as float64)."""
    g = model.graph
    env = {}
    for t in g.initializer:
        a = numpy_helper.to_array(t)
        env[t.name] = a.astype(np.float64) if a.dtype == np.float32 else a
    env.update(feeds)
    for n in g.node:
        a = _attrs(n)
        i = [env[name] if name else None for name in n.input]
        op = n.op_type
        if op == "Constant":
            y = numpy_helper.to_array(a["value"])
            y = y.astype(np.float64) if y.dtype == np.float32 else y
        elif op == "Identity":
            y = i[0]
        elif op == "Shape":
            y = np.array(i[0].shape, np.int64)
        elif op == "Gather":
            y = np.take(i[0], i[1].astype(np.int64), axis=a.get("axis", 0))
        elif op == "Cast":
            to = a["to"]
            y = i[0].astype(np.float64) if to == TensorProto.FLOAT else i[0].astype(
                onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[to])
        elif op == "Range":
            y = np.arange(i[0], i[1], i[2]).astype(i[0].dtype)
        elif op == "Unsqueeze":
            axes = a.get("axes", i[1] if len(i) > 1 else None)
            y = i[0]
            for ax in sorted(int(v) % (y.ndim + len(axes)) for v in axes):
                y = np.expand_dims(y, ax)
        elif op in ("Add", "Sub", "Mul", "Div", "Pow"):
            f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
                 "Pow": np.power}[op]
            y = f(i[0], i[1])
            if op == "Div" and y.dtype.kind == "f" and i[0].dtype.kind == "i":
                y = np.floor_divide(i[0], i[1])
        elif op == "ReduceMean":
            axes = tuple(a["axes"]) if "axes" in a else tuple(int(v) for v in i[1])
            y = i[0].mean(axis=axes, keepdims=bool(a.get("keepdims", 1)))
        elif op == "Sqrt":
            y = np.sqrt(i[0])
        elif op == "Erf":
            y = _erf(i[0])
        elif op == "Tanh":
            y = np.tanh(i[0])
        elif op == "MatMul":
            y = np.matmul(i[0], i[1])
        elif op == "Gemm":
            b = i[1].T if a.get("transB", 0) else i[1]
            aa = i[0].T if a.get("transA", 0) else i[0]
            y = a.get("alpha", 1.0) * aa @ b + (a.get("beta", 1.0) * i[2] if len(i) > 2 else 0)
        elif op == "Concat":
            y = np.concatenate(i, axis=a["axis"])
        elif op == "Reshape":
            shape = [d if d != 0 else i[0].shape[k] for k, d in enumerate(i[1].astype(np.int64))]
            y = i[0].reshape(shape)
        elif op == "Transpose":
            y = np.transpose(i[0], a["perm"])
        elif op == "Softmax":
            x = i[0] - i[0].max(axis=a.get("axis", -1), keepdims=True)
            e = np.exp(x)
            y = e / e.sum(axis=a.get("axis", -1), keepdims=True)
        elif op == "LayerNormalization":
            axis = a.get("axis", -1)
            axes = tuple(range(axis % i[0].ndim, i[0].ndim))
            mu = i[0].mean(axis=axes, keepdims=True)
            var = ((i[0] - mu) ** 2).mean(axis=axes, keepdims=True)
            y = (i[0] - mu) / np.sqrt(var + a.get("epsilon", 1e-5)) * i[1] + i[2]
        elif op == "Slice":
            y = i[0]
            axes = i[3] if len(i) > 3 else range(len(i[1]))
            steps = i[4] if len(i) > 4 else [1] * len(i[1])
            idx = [slice(None)] * y.ndim
            for s, e, ax, st in zip(i[1], i[2], axes, steps):
                idx[int(ax)] = slice(int(s), int(e), int(st))
            y = y[tuple(idx)]
        else:
            raise NotImplementedError(f"{op} ({n.name})")
        env[n.output[0]] = np.asarray(y)
    return env


def bind_sequence(model, length, batch=1):
    """The model with its `sequence` and `batch` dimensions fixed."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in list(m.graph.input) + list(m.graph.output):
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param in ("sequence", "batch"):
                size = length if d.dim_param == "sequence" else batch
                d.Clear()
                d.dim_value = size
    return m


def token_batch(length, count, seed):
    """Token ids with padded tails (the mask zero there), as a tokenizer writes them."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB, size=(count, length), dtype=np.int64)
    lengths = rng.integers(length // 2, length + 1, size=count)
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)
    return ids * mask, mask


def _u8_params(lo, hi):
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255.0 if hi > lo else 1.0
    zp = int(np.clip(round(-lo / scale), 0, 255))
    return np.float32(scale), np.uint8(zp)


def _initializers(model):
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _s8_weights(w, axis):
    """Symmetric s8 codes of w, per channel along `axis` (None: per tensor), and scales."""
    if axis is None:
        scale = np.float32(max(np.abs(w).max(), 1e-8) / 127.0)
    else:
        red = tuple(d for d in range(w.ndim) if d != axis)
        scale = (np.maximum(np.abs(w).max(axis=red), 1e-8) / 127.0).astype(np.float32)
    sb = scale if axis is None else np.expand_dims(scale, tuple(d for d in range(w.ndim) if d != axis))
    q = np.clip(np.rint(w.astype(np.float32) / sb), -127, 127).astype(np.int8)
    return q, scale


def calibrate(model, length, batches=4):
    """Min and max of every float tensor over generated token batches."""
    ranges = {}
    for b in range(batches):
        ids, mask = token_batch(length, 1, seed=100 + b)
        env = run(model, {"input_ids": ids, "attention_mask": mask})
        for name, v in env.items():
            if v.dtype.kind != "f" or v.size == 0:
                continue
            lo, hi = float(v.min()), float(v.max())
            if name in ranges:
                lo, hi = min(lo, ranges[name][0]), max(hi, ranges[name][1])
            ranges[name] = (lo, hi)
    return ranges


def _replace_nodes(g, nodes, added):
    """g's nodes become `nodes`, `added` joins its initializers, unused ones go."""
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(added)
    used = {i for n in g.node for i in n.input}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)


def quantize_static(model, ranges):
    """ONNX Runtime's QDQ form (see the module comment)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = _initializers(m)
    nodes, added, qdq_of = [], [], {}

    def act_qdq(name):
        if name not in qdq_of:
            scale, zp = _u8_params(*ranges[name])
            s, z = name + "_scale", name + "_zero_point"
            added.extend([numpy_helper.from_array(np.array(scale, np.float32), s),
                          numpy_helper.from_array(np.array(zp, np.uint8), z)])
            q, d = name + "_QuantizeLinear", name + "_DequantizeLinear"
            nodes.append(helper.make_node("QuantizeLinear", [name, s, z], [q], name=q))
            nodes.append(helper.make_node("DequantizeLinear", [q, s, z], [d], name=d))
            qdq_of[name] = d
        return qdq_of[name]

    def weight_dq(name, axis):
        q, scale = _s8_weights(inits[name].astype(np.float32), axis)
        qn, sn, zn, dn = name + "_quantized", name + "_scale", name + "_zero_point", name + "_DequantizeLinear"
        added.extend([numpy_helper.from_array(q, qn), numpy_helper.from_array(scale, sn),
                      numpy_helper.from_array(np.zeros(scale.shape, np.int8), zn)])
        attrs = {"axis": axis} if axis is not None else {}
        nodes.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [dn], name=dn, **attrs))
        return dn

    for n in g.node:
        if n.op_type in ("MatMul", "Gemm"):
            new_inputs = list(n.input)
            for k in (0, 1):
                name = n.input[k]
                if name in inits:
                    trans_b = n.op_type == "Gemm" and _attrs(n).get("transB", 0)
                    new_inputs[k] = weight_dq(name, 0 if trans_b else inits[name].ndim - 1)
                else:
                    new_inputs[k] = act_qdq(name)
            del n.input[:]
            n.input.extend(new_inputs)
        nodes.append(n)
    _replace_nodes(g, nodes, added)
    return m


def quantize_dynamic(model):
    """ONNX Runtime's dynamic form (see the module comment)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = _initializers(m)
    nodes, added = [], []
    for n in g.node:
        if n.op_type == "Gather" and n.input[0] in inits and inits[n.input[0]].dtype == np.float32 \
                and inits[n.input[0]].ndim == 2:
            # An embedding table, as ORT's GatherQuant writes it: s8 per-tensor
            # codes, the Gather on the codes, then DequantizeLinear.
            w, y = n.input[0], n.output[0]
            q, scale = _s8_weights(inits[w], None)
            wq, ws, wz = w + "_quantized", w + "_scale", w + "_zero_point"
            added.extend([numpy_helper.from_array(q, wq),
                          numpy_helper.from_array(np.array(scale, np.float32), ws),
                          numpy_helper.from_array(np.array(0, np.int8), wz)])
            yq = y + "_output_quantized"
            nodes.append(helper.make_node("Gather", [wq, n.input[1]], [yq], name=n.name + "_quant",
                                          axis=_attrs(n).get("axis", 0)))
            nodes.append(helper.make_node("DequantizeLinear", [yq, ws, wz], [y],
                                          name=yq + "_DequantizeLinear"))
            continue
        if n.op_type != "MatMul" or n.input[1] not in inits:
            nodes.append(n)
            continue
        a, w, y = n.input[0], n.input[1], n.output[0]
        q, scale = _s8_weights(inits[w].astype(np.float32), None)
        wq, ws, wz = w + "_quantized", w + "_scale", w + "_zero_point"
        added.extend([numpy_helper.from_array(q, wq), numpy_helper.from_array(np.array(scale, np.float32), ws),
                      numpy_helper.from_array(np.array(0, np.int8), wz)])
        base = n.name or y
        aq, as_, az = a + "_quantized", a + "_scale", a + "_zero_point"
        if not any(x.op_type == "DynamicQuantizeLinear" and x.input[0] == a for x in nodes):
            nodes.append(helper.make_node("DynamicQuantizeLinear", [a], [aq, as_, az],
                                          name=a + "_DynamicQuantizeLinear"))
        mm, cast, prod = y + "_output_quantized", y + "_output_quantized_cast", base + "_scales_mul"
        nodes.append(helper.make_node("MatMulInteger", [aq, wq, az, wz], [mm], name=base + "_quant"))
        nodes.append(helper.make_node("Cast", [mm], [cast], name=mm + "_cast_output", to=TensorProto.FLOAT))
        nodes.append(helper.make_node("Mul", [as_, ws], [prod + ":0"], name=prod))
        nodes.append(helper.make_node("Mul", [cast, prod + ":0"], [y], name=base + "_output_scale_mul"))
    _replace_nodes(g, nodes, added)
    opset = next(o for o in m.opset_import if o.domain in ("", "ai.onnx"))
    opset.version = max(opset.version, 11)  # DynamicQuantizeLinear
    return m


def _write(model, path):
    data = model.SerializeToString()
    if not os.path.exists(path) or open(path, "rb").read() != data:
        with open(path, "wb") as fh:
            fh.write(data)


def build(out_dir, only=None):
    """Writes OUT/transformers/ (see the module comment)."""
    target = os.path.join(out_dir, "transformers")
    os.makedirs(target, exist_ok=True)
    symbolic = os.path.join(out_dir, "symbolic")
    os.makedirs(symbolic, exist_ok=True)
    for src in sorted(os.listdir(os.path.join(HERE, "encoders"))):
        if not src.endswith(".onnx"):
            continue
        name = src[:-5]
        if only and name not in only:
            continue
        base = onnx.load(os.path.join(HERE, "encoders", src))
        for length in SEQUENCE_LENGTHS:
            f32 = bind_sequence(base, length)
            ranges = calibrate(f32, length)
            ids, mask = token_batch(length, 1, seed=7)
            stem = f"{name}_s{length}"
            logits = run(f32, {"input_ids": ids, "attention_mask": mask})["logits"]
            for form, model in (("f32", f32), ("qdq", quantize_static(f32, ranges)),
                                ("dyn", quantize_dynamic(f32))):
                onnx.checker.check_model(model)
                path = os.path.join(target, f"{stem}_{form}.onnx")
                _write(model, path)
                np.save(os.path.join(target, f"{stem}_{form}.input_ids.npy"), ids)
                np.save(os.path.join(target, f"{stem}_{form}.attention_mask.npy"), mask)
                print(f"corpus: {path} ({len(model.graph.node)} nodes)")
            np.save(os.path.join(target, f"{stem}_f32.logits.npy"), logits.astype(np.float32))
        for form, model in (("f32", base), ("qdq", quantize_static(base, ranges)),
                            ("dyn", quantize_dynamic(base))):
            onnx.checker.check_model(model)
            path = os.path.join(symbolic, f"{name}_sym_{form}.onnx")
            _write(model, path)
            print(f"corpus: {path} ({len(model.graph.node)} nodes)")
