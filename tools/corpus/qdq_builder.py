"""An eager builder of QDQ ONNX models in the forms exporters write.

Each method both appends ONNX nodes and computes the float value of its output
on a calibration batch with numpy, so every activation's quantization range
comes from the data that flows through it (min/max calibration, as ONNX
Runtime's quantize_static does by default).

Conventions follow ONNX Runtime's QDQ quantizer:
  activations  QuantizeLinear -> DequantizeLinear with scalar (rank-0) scale
               and zero point; u8 asymmetric (zero point from min/max, range
               widened to include 0) or s8 symmetric (zero point 0);
  weights      int8 initializer -> DequantizeLinear, symmetric, per output
               channel (axis 0 for Conv and Gemm, 1 for ConvTranspose and
               MatMul) or per tensor, with or without the zero-point input;
  bias         int32 initializer -> DequantizeLinear(scale = sx * sw[c],
               zero point 0), or a plain f32 initializer;
  ops such as MaxPool, Reshape, Transpose, Resize take the quantization
               parameters of their input on their output.
Torch-style exports write scales and zero points as 1-element tensors
(`param_rank=1`).
"""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

U8, S8 = "u8", "s8"


def _conv_out(n, k, s, p0, p1, d):
    return (n + p0 + p1 - d * (k - 1) - 1) // s + 1


def conv2d(x, w, b, strides, pads, dilations, group):
    n, c, h, wd = x.shape
    oc, icg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = _conv_out(h, kh, strides[0], pads[0], pads[2], dilations[0])
    ow = _conv_out(wd, kw, strides[1], pads[1], pads[3], dilations[1])
    y = np.zeros((n, oc, oh, ow), dtype=np.float64)
    ocg = oc // group
    for g in range(group):
        xs = xp[:, g * icg:(g + 1) * icg]
        ws = w[g * ocg:(g + 1) * ocg]
        for i in range(kh):
            for j in range(kw):
                hi, wj = i * dilations[0], j * dilations[1]
                patch = xs[:, :, hi:hi + strides[0] * (oh - 1) + 1:strides[0],
                           wj:wj + strides[1] * (ow - 1) + 1:strides[1]]
                y[:, g * ocg:(g + 1) * ocg] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y


def conv_transpose2d(x, w, b, strides, pads, output_padding):
    n, ic, h, wd = x.shape
    _, oc, kh, kw = w.shape
    full_h = (h - 1) * strides[0] + kh + output_padding[0]
    full_w = (wd - 1) * strides[1] + kw + output_padding[1]
    y = np.zeros((n, oc, full_h, full_w), dtype=np.float64)
    for i in range(kh):
        for j in range(kw):
            contrib = np.einsum("nchw,co->nohw", x, w[:, :, i, j])
            y[:, :, i:i + strides[0] * (h - 1) + 1:strides[0],
              j:j + strides[1] * (wd - 1) + 1:strides[1]] += contrib
    y = y[:, :, pads[0]:full_h - pads[2], pads[1]:full_w - pads[3]]
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y


def pool2d(x, kernel, strides, pads, mode):
    n, c, h, wd = x.shape
    fill = -np.inf if mode == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=fill)
    ones = np.pad(np.ones((h, wd)), ((pads[0], pads[2]), (pads[1], pads[3])))
    oh = _conv_out(h, kernel[0], strides[0], pads[0], pads[2], 1)
    ow = _conv_out(wd, kernel[1], strides[1], pads[1], pads[3], 1)
    y = np.full((n, c, oh, ow), fill)
    count = np.zeros((oh, ow))
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            sl = (slice(i, i + strides[0] * (oh - 1) + 1, strides[0]),
                  slice(j, j + strides[1] * (ow - 1) + 1, strides[1]))
            patch = xp[:, :, sl[0], sl[1]]
            y = np.maximum(y, patch) if mode == "max" else y + patch
            count += ones[sl]
    return y if mode == "max" else y / count  # count_include_pad = 0


def hardsigmoid(x, alpha=0.2, beta=0.5):
    return np.clip(alpha * x + beta, 0.0, 1.0)


class QdqModel:
    """One model under construction; values are numpy arrays of the batch."""

    def __init__(self, name, seed, opset=13, param_rank=0):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.opset = opset
        self.param_rank = param_rank
        self.nodes, self.inits, self.inputs, self.outputs = [], [], [], []
        self.values = {}
        self.qparams = {}  # dequantized tensor -> (scale, zero point, type)
        self.dequantized = {}  # tensor -> its DequantizeLinear output
        self.count = 0

    # --- plumbing ----------------------------------------------------------
    def uid(self, base):
        self.count += 1
        return f"{base}_{self.count}"

    def init(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op, inputs, outputs, name=None, **attrs):
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name or self.uid(op), **attrs))

    def param(self, name, value, dtype):
        arr = np.array(value, dtype=dtype)
        if self.param_rank == 1 and arr.ndim == 0:
            arr = arr.reshape(1)
        return self.init(name, arr)

    def input(self, name, shape, low=-1.0, high=1.0):
        self.values[name] = self.rng.uniform(low, high, size=shape).astype(np.float32)
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def weight(self, shape, scale=None):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else 1.0 / np.sqrt(fan_in)
        return self.rng.normal(0.0, s, size=shape).astype(np.float32)

    # --- quantization ------------------------------------------------------
    @staticmethod
    def activation_params(v, qtype):
        lo, hi = min(float(v.min()), 0.0), max(float(v.max()), 0.0)
        if qtype == S8:
            m = max(abs(lo), abs(hi)) or 1.0
            return np.float32(m / 127.0), 0
        scale = np.float32((hi - lo) / 255.0 or 1.0)
        zp = int(np.clip(np.round(-lo / scale), 0, 255))
        return scale, zp

    def qdq(self, x, qtype=U8, params=None):
        """Q -> DQ of activation `x`; `params` reuses a (scale, zp) pair.

        A tensor is quantized once; later uses share its DequantizeLinear."""
        if x in self.dequantized:
            return self.dequantized[x]
        scale, zp = params if params is not None else self.activation_params(self.values[x], qtype)
        dt = np.uint8 if qtype == U8 else np.int8
        s = self.param(x + "_scale", scale, np.float32)
        z = self.param(x + "_zero_point", zp, dt)
        q, dq = x + "_QuantizeLinear_Output", x + "_DequantizeLinear_Output"
        self.node("QuantizeLinear", [x, s, z], [q], name=x + "_QuantizeLinear")
        self.node("DequantizeLinear", [q, s, z], [dq], name=x + "_DequantizeLinear")
        lo, hi = (0, 255) if qtype == U8 else (-128, 127)
        v = self.values[x].astype(np.float64)
        self.values[dq] = ((np.clip(np.round(v / scale) + zp, lo, hi) - zp) * scale).astype(np.float32)
        self.qparams[dq] = (scale, zp, qtype)
        self.dequantized[x] = dq
        return dq

    def quantized_weight(self, w, axis, per_channel=True, with_zp=True):
        """int8 symmetric weights + DequantizeLinear; returns (dq name, scales)."""
        base = self.uid("W")
        if per_channel:
            red = tuple(i for i in range(w.ndim) if i != axis)
            scale = (np.abs(w).max(axis=red) / 127.0).astype(np.float32)
            scale[scale == 0] = 1.0
            shape = [1] * w.ndim
            shape[axis] = -1
            q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
            inputs = [self.init(base + "_quantized", q), self.init(base + "_scale", scale)]
            if with_zp:
                inputs.append(self.init(base + "_zero_point", np.zeros(scale.shape, np.int8)))
            dq = base + "_DequantizeLinear_Output"
            self.node("DequantizeLinear", inputs, [dq], name=base + "_DequantizeLinear", axis=axis)
            self.values[dq] = (q.astype(np.float32) * scale.reshape(shape)).astype(np.float32)
            return dq, scale
        scale = np.float32(np.abs(w).max() / 127.0 or 1.0)
        q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
        inputs = [self.init(base + "_quantized", q), self.param(base + "_scale", scale, np.float32)]
        if with_zp:
            inputs.append(self.param(base + "_zero_point", 0, np.int8))
        dq = base + "_DequantizeLinear_Output"
        self.node("DequantizeLinear", inputs, [dq], name=base + "_DequantizeLinear")
        self.values[dq] = (q.astype(np.float32) * scale).astype(np.float32)
        return dq, np.full(w.shape[axis], scale, np.float32)

    def bias(self, b, x_dq, w_scale, int32=True):
        """int32 bias + DequantizeLinear(scale sx * sw[c]), or plain f32."""
        if not int32:
            name = self.init(self.uid("B"), b.astype(np.float32))
            self.values[name] = b.astype(np.float32)
            return name
        sx = self.qparams[x_dq][0]
        scale = (np.float32(sx) * w_scale).astype(np.float32)
        q = np.round(b / scale).astype(np.int32)
        base = self.uid("B")
        inputs = [self.init(base + "_quantized", q)]
        if len(scale) > 1 and not np.all(scale == scale[0]):
            inputs += [self.init(base + "_quantized_scale", scale),
                       self.init(base + "_quantized_zero_point", np.zeros(len(scale), np.int32))]
            attrs = {"axis": 0}
        else:
            inputs += [self.param(base + "_quantized_scale", scale[0], np.float32),
                       self.param(base + "_quantized_zero_point", 0, np.int32)]
            attrs = {}
        dq = base + "_DequantizeLinear_Output"
        self.node("DequantizeLinear", inputs, [dq], name=base + "_DequantizeLinear", **attrs)
        self.values[dq] = (q.astype(np.float64) * scale).astype(np.float32)
        return dq

    # --- layers ------------------------------------------------------------
    def conv(self, x, oc, k=3, stride=1, pad=None, dilation=1, group=1, per_channel=True,
             weight_zp=True, bias="int32", quantize_input=True, qtype=U8):
        xv = self.values[x]
        ic = xv.shape[1]
        pad = k // 2 if pad is None else pad
        w = self.weight((oc, ic // group, k, k))
        b = self.rng.normal(0.0, 0.1, size=oc).astype(np.float32)
        xq = self.qdq(x, qtype) if quantize_input else x
        wdq, ws = self.quantized_weight(w, 0, per_channel, weight_zp)
        inputs = [xq, wdq]
        if bias:
            inputs.append(self.bias(b, xq, ws, int32=bias == "int32"))
        y = self.uid("conv")
        attrs = dict(kernel_shape=[k, k], strides=[stride] * 2, pads=[pad] * 4,
                     dilations=[dilation] * 2, group=group)
        self.node("Conv", inputs, [y], name=y, **attrs)
        self.values[y] = conv2d(self.values[xq].astype(np.float64), self.values[wdq],
                                self.values[inputs[2]] if bias else None, [stride] * 2,
                                [pad] * 4, [dilation] * 2, group).astype(np.float32)
        return y

    def conv_transpose(self, x, oc, k=4, stride=2, pad=1, output_padding=0, per_channel=True,
                       weight_zp=True, bias="int32", qtype=U8):
        ic = self.values[x].shape[1]
        w = self.weight((ic, oc, k, k), scale=1.0 / np.sqrt(ic * k * k / (stride * stride)))
        b = self.rng.normal(0.0, 0.1, size=oc).astype(np.float32)
        xq = self.qdq(x, qtype)
        wdq, ws = self.quantized_weight(w, 1, per_channel, weight_zp)
        inputs = [xq, wdq]
        if bias:
            inputs.append(self.bias(b, xq, ws, int32=bias == "int32"))
        y = self.uid("convtranspose")
        self.node("ConvTranspose", inputs, [y], name=y, kernel_shape=[k, k], strides=[stride] * 2,
                  pads=[pad] * 4, output_padding=[output_padding] * 2)
        self.values[y] = conv_transpose2d(self.values[xq].astype(np.float64), self.values[wdq],
                                          self.values[inputs[2]] if bias else None, [stride] * 2,
                                          [pad] * 4, [output_padding] * 2).astype(np.float32)
        return y

    def gemm(self, x, n, per_channel=True, bias="int32", qtype=U8):
        k = self.values[x].shape[1]
        w = self.weight((n, k))
        b = self.rng.normal(0.0, 0.1, size=n).astype(np.float32)
        xq = self.qdq(x, qtype)
        wdq, ws = self.quantized_weight(w, 0, per_channel)
        inputs = [xq, wdq]
        if bias:
            inputs.append(self.bias(b, xq, ws, int32=bias == "int32"))
        y = self.uid("gemm")
        self.node("Gemm", inputs, [y], name=y, transB=1)
        out = self.values[xq].astype(np.float64) @ self.values[wdq].T.astype(np.float64)
        if bias:
            out += self.values[inputs[2]]
        self.values[y] = out.astype(np.float32)
        return y

    def matmul(self, x, n, per_channel=True, qtype=U8):
        k = self.values[x].shape[-1]
        w = self.weight((k, n), scale=1.0 / np.sqrt(k))
        xq = self.qdq(x, qtype)
        wdq, _ = self.quantized_weight(w, 1, per_channel)
        y = self.uid("matmul")
        self.node("MatMul", [xq, wdq], [y], name=y)
        self.values[y] = (self.values[xq].astype(np.float64) @ self.values[wdq]).astype(np.float32)
        return y

    # --- activations and other ops -------------------------------------------
    def unary(self, op, x, fn, **attrs):
        y = self.uid(op.lower())
        self.node(op, [x], [y], name=y, **attrs)
        self.values[y] = fn(self.values[x].astype(np.float64)).astype(np.float32)
        return y

    def relu(self, x):
        return self.unary("Relu", x, lambda v: np.maximum(v, 0))

    def clip(self, x, lo=0.0, hi=6.0):
        y = self.uid("clip")
        self.node("Clip", [x, self.param(y + "_min", lo, np.float32),
                           self.param(y + "_max", hi, np.float32)], [y], name=y)
        self.values[y] = np.clip(self.values[x], lo, hi)
        return y

    def leaky_relu(self, x, alpha=0.1):
        return self.unary("LeakyRelu", x, lambda v: np.where(v >= 0, v, alpha * v), alpha=alpha)

    def sigmoid(self, x):
        return self.unary("Sigmoid", x, lambda v: 1.0 / (1.0 + np.exp(-v)))

    def hard_sigmoid(self, x):
        return self.unary("HardSigmoid", x, hardsigmoid, alpha=0.2, beta=0.5)

    def hard_swish(self, x):
        if self.opset >= 14:
            return self.unary("HardSwish", x, lambda v: v * hardsigmoid(v, 1 / 6, 0.5))
        hs = self.unary("HardSigmoid", x, lambda v: hardsigmoid(v, 1 / 6, 0.5),
                        alpha=1 / 6, beta=0.5)
        return self.binary("Mul", x, hs)

    def binary(self, op, a, b):
        y = self.uid(op.lower())
        self.node(op, [a, b], [y], name=y)
        fn = {"Add": np.add, "Mul": np.multiply, "Sub": np.subtract}[op]
        self.values[y] = fn(self.values[a], self.values[b]).astype(np.float32)
        return y

    def max_pool(self, x, k=2, stride=2, pad=0):
        y = self.uid("maxpool")
        self.node("MaxPool", [x], [y], name=y, kernel_shape=[k, k], strides=[stride] * 2,
                  pads=[pad] * 4)
        self.values[y] = pool2d(self.values[x], [k, k], [stride] * 2, [pad] * 4, "max")
        return y

    def avg_pool(self, x, k=2, stride=2, pad=0):
        y = self.uid("avgpool")
        self.node("AveragePool", [x], [y], name=y, kernel_shape=[k, k], strides=[stride] * 2,
                  pads=[pad] * 4)
        self.values[y] = pool2d(self.values[x], [k, k], [stride] * 2, [pad] * 4, "avg")
        return y

    def global_avg_pool(self, x):
        return self.unary("GlobalAveragePool", x, lambda v: v.mean(axis=(2, 3), keepdims=True))

    def concat(self, xs, axis=1):
        y = self.uid("concat")
        self.node("Concat", xs, [y], name=y, axis=axis)
        self.values[y] = np.concatenate([self.values[x] for x in xs], axis=axis)
        return y

    def resize_nearest(self, x, factor=2):
        y = self.uid("resize")
        roi = self.init(y + "_roi", np.zeros(0, np.float32))
        scales = self.init(y + "_scales", np.array([1, 1, factor, factor], np.float32))
        self.node("Resize", [x, roi, scales], [y], name=y, mode="nearest",
                  coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        self.values[y] = self.values[x].repeat(factor, axis=2).repeat(factor, axis=3)
        return y

    def reshape(self, x, shape):
        y = self.uid("reshape")
        s = self.init(y + "_shape", np.array(shape, np.int64))
        self.node("Reshape", [x, s], [y], name=y)
        self.values[y] = self.values[x].reshape(shape)
        return y

    def flatten(self, x):
        return self.unary("Flatten", x, lambda v: v.reshape(v.shape[0], -1), axis=1)

    def transpose(self, x, perm):
        return self.unary("Transpose", x, lambda v: v.transpose(perm), perm=perm)

    # --- output --------------------------------------------------------------
    def output(self, y):
        self.outputs.append(helper.make_tensor_value_info(y, TensorProto.FLOAT,
                                                          list(self.values[y].shape)))
        return y

    def model(self):
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        m = helper.make_model(graph, producer_name="qfuse-corpus",
                              opset_imports=[helper.make_opsetid("", self.opset)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m
