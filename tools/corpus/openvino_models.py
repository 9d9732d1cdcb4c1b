"""Models in OpenVINO IR form (model.xml + model.bin), with numpy's output.

The files are written as OpenVINO's serializer (src/core/src/pass/serialize.cpp)
writes them: <net name version> with <layers> in topological order (Parameters
first, Results last), each <layer id name type version> with its <data>
attributes, <input> ports numbered from 0 and <output> ports after them (each
with precision, v11's tensor names and <dim>s), then <edges> sorted by source
layer and, in v11, the model's <rt_info>. Const data is element_type, shape,
offset and size into the .bin, each distinct constant written once.

Quantization follows NNCF / POT: activations go through FakeQuantize levels 256
per tensor (after a ReLU [0, s], else [-s * 128 / 127, s]); weights are either
compressed, i8 Const -> Convert(f32) [-> Subtract(zero point)] ->
Multiply(scale[c]), or f32 Const -> FakeQuantize(levels 255, [-s_c, s_c] per
output channel). Biases are an Add of [1, C, 1, 1] after the layer.

Each model also gets `<name>.ov.input.npy` and `<name>.ov.output.npy` (the
network run by numpy in float64, FakeQuantize by the seed's formula, the
compressed weights dequantized as the runtime does in f32), and
`<name>.ov.int8_layers`, the number of convolutions and MatMuls whose input
is quantized (a FakeQuantize output, possibly behind data movement): the
layers qfuse must run as int8 primitives.
"""

import math
import os

import numpy as np

from nncf_models import fake_quantize
from qdq_builder import conv2d

# Ops that keep their input's quantization grid (what the int8 count looks through).
DATA_MOVEMENT = {"Reshape", "Transpose", "Split", "VariadicSplit", "MaxPool", "Squeeze",
                 "Unsqueeze"}
LAYERS = {"Convolution", "GroupConvolution", "MatMul", "ConvolutionBackpropData"}
PRECISION = {"f32": "FP32", "i8": "I8", "u8": "U8", "i32": "I32", "i64": "I64", "f16": "FP16"}
NP_TYPE = {"f32": np.float32, "i8": np.int8, "u8": np.uint8, "i32": np.int32, "i64": np.int64}


def fmt(v):
    """An attribute value as the serializer writes it."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "%.17g" % v
    if isinstance(v, (list, tuple)):
        return ", ".join(str(int(x)) for x in v)
    return str(v)


def erf(x):
    return np.vectorize(math.erf)(x)


class Port:
    def __init__(self, layer, index):
        self.layer, self.index = layer, index

    @property
    def value(self):
        return self.layer.values[self.index]


class Layer:
    def __init__(self, net, type_, version, name, inputs, data, values, out_types, names):
        self.net, self.type, self.version, self.name = net, type_, version, name
        self.inputs, self.data, self.values = inputs, data, values
        self.out_types, self.names = out_types, names

    def out(self, k=0):
        return Port(self, k)


class IrModel:
    """A network under construction: layers, the .bin, and numpy values."""

    def __init__(self, name, seed, version=11):
        self.name, self.version = name, version
        self.rng = np.random.default_rng(seed)
        self.layers, self.params, self.results = [], [], []
        self.bin = bytearray()
        self.offsets = {}
        self.count = 0
        self.input_value = None

    def uid(self, base):
        self.count += 1
        return f"{base}_{self.count}"

    def layer(self, type_, version, inputs, data, values, out_types=None, name=None, names=None):
        name = name or self.uid(type_.lower())
        out_types = out_types or ["f32"] * len(values)
        if names is None:
            names = [name] if len(values) == 1 else [f"{name}:{k}" for k in range(len(values))]
        lyr = Layer(self, type_, version, name, inputs, data, values, out_types, names)
        self.layers.append(lyr)
        return lyr

    # --- the operators ------------------------------------------------------
    def parameter(self, name, shape):
        x = self.rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
        self.input_value = x
        lyr = Layer(self, "Parameter", "opset1", name, [],
                    {"shape": ",".join(str(d) for d in shape), "element_type": "f32"},
                    [x.astype(np.float64)], ["f32"], [name])
        self.params.append(lyr)
        return lyr.out()

    def const(self, array, etype="f32"):
        a = np.array(array, NP_TYPE[etype], order="C")
        raw = a.tobytes()
        if raw not in self.offsets:  # the serializer writes equal constants once
            self.offsets[raw] = len(self.bin)
            self.bin += raw
        data = {"element_type": etype, "shape": list(a.shape), "offset": self.offsets[raw],
                "size": len(raw)}
        return self.layer("Const", "opset1", [], data, [a], [etype], names=[]).out()

    def op(self, type_, inputs, value, version="opset1", **data):
        return self.layer(type_, version, inputs, data, [value]).out()

    def fq(self, x, lo, hi, levels, shape=()):
        lo = np.asarray(lo, np.float32).reshape(shape)
        hi = np.asarray(hi, np.float32).reshape(shape)
        limits = [self.const(v) for v in (lo, hi, lo, hi)]
        y = fake_quantize(x.value, lo, hi, lo, hi, levels)
        return self.op("FakeQuantize", [x] + limits, y, levels=levels, auto_broadcast="numpy")

    def fq_act(self, x, unsigned=False):
        s = float(np.abs(x.value).max()) or 1.0
        return self.fq(x, 0.0 if unsigned else -s * 128.0 / 127.0, s, 256)

    def weights_fq(self, w):
        """f32 Const -> FakeQuantize(255) per output channel [-s_c, s_c]."""
        s = np.abs(w).reshape(w.shape[0], -1).max(axis=1).astype(np.float32)
        s[s == 0] = 1.0
        return self.fq(self.const(w), -s, s, 255, (w.shape[0],) + (1,) * (w.ndim - 1))

    def weights_i8(self, w, zero_point=False, group_shape=None):
        """i8 Const -> Convert -> [Subtract(zp)] -> Multiply(scale) per output channel."""
        oc = w.shape[0]
        s = (np.abs(w).reshape(oc, -1).max(axis=1) / 127.0).astype(np.float32)
        s[s == 0] = 1.0
        pshape = (oc,) + (1,) * (w.ndim - 1)
        zp = (self.rng.integers(-3, 4, size=oc) if zero_point else np.zeros(oc)).astype(np.float32)
        # Codes q - zp within [-124, 124] and q within [-127, 127].
        q = (np.clip(np.rint(w / s.reshape(pshape)), -124, 124) + zp.reshape(pshape)).astype(np.int8)
        if group_shape is not None:
            q = q.reshape(group_shape)
            pshape = group_shape[:2] + (1,) * (len(group_shape) - 2)
        v = q.astype(np.float32)
        t = self.op("Convert", [self.const(q, "i8")], v.astype(np.float64),
                    destination_type="f32")
        if zero_point:
            v = (v - zp.reshape(pshape)).astype(np.float32)
            t = self.op("Subtract", [t, self.const(zp.reshape(pshape))], v.astype(np.float64),
                        auto_broadcast="numpy")
        v = (v * s.reshape(pshape)).astype(np.float32)
        return self.op("Multiply", [t, self.const(s.reshape(pshape))], v.astype(np.float64),
                       auto_broadcast="numpy")

    def conv(self, x, oc, k=3, stride=1, group=1, compressed=False, zero_point=False, bias=True):
        ic = x.value.shape[1]
        w = self.rng.normal(0.0, 1.0 / np.sqrt(ic // group * k * k),
                            size=(oc, ic // group, k, k)).astype(np.float32)
        p = k // 2
        attrs = dict(strides=[stride] * 2, dilations=[1, 1], pads_begin=[p, p], pads_end=[p, p],
                     auto_pad="explicit")
        if group > 1:
            gshape = (group, oc // group, ic // group, k, k)
            wq = self.weights_i8(w, zero_point, gshape) if compressed else None
            if wq is None:
                wq = self.weights_fq(w.reshape(oc, ic // group, k, k))
                wq = self.op("Reshape", [wq, self.const(np.array(gshape, np.int64), "i64")],
                             wq.value.reshape(gshape), special_zero=False)
            wf = wq.value.reshape(oc, ic // group, k, k)
            y = conv2d(x.value, wf, None, [stride] * 2, [p] * 4, [1, 1], group)
            t = self.op("GroupConvolution", [x, wq], y, **attrs)
        else:
            wq = self.weights_i8(w, zero_point) if compressed else self.weights_fq(w)
            y = conv2d(x.value, wq.value, None, [stride] * 2, [p] * 4, [1, 1], 1)
            t = self.op("Convolution", [x, wq], y, **attrs)
        if not bias:
            return t
        b = self.rng.normal(0.0, 0.1, size=(1, oc, 1, 1)).astype(np.float32)
        return self.add(t, self.const(b))

    def matmul(self, a, b, transpose_a=False, transpose_b=False):
        av, bv = a.value, b.value
        if transpose_a:
            av = np.swapaxes(av, -1, -2)
        if transpose_b:
            bv = np.swapaxes(bv, -1, -2)
        return self.op("MatMul", [a, b], av @ bv, transpose_a=transpose_a,
                       transpose_b=transpose_b)

    def dense(self, x, n, compressed=False):
        k = x.value.shape[-1]
        w = self.rng.normal(0.0, 1.0 / np.sqrt(k), size=(n, k)).astype(np.float32)
        wq = self.weights_i8(w) if compressed else self.weights_fq(w)
        y = self.matmul(x, wq, transpose_b=True)
        return self.add(y, self.const(self.rng.normal(0.0, 0.1, size=(n,)).astype(np.float32)))

    def binary(self, type_, a, b, f):
        return self.op(type_, [a, b], f(a.value, b.value), auto_broadcast="numpy")

    def add(self, a, b):
        return self.binary("Add", a, b, lambda p, q: p + q)

    def mul(self, a, b):
        return self.binary("Multiply", a, b, lambda p, q: p * q)

    def relu(self, x):
        return self.op("ReLU", [x], np.maximum(x.value, 0.0))

    def swish(self, x):
        v = x.value
        return self.op("Swish", [x], v / (1.0 + np.exp(-v)), version="opset4")

    def hswish(self, x):
        v = x.value
        return self.op("HSwish", [x], v * np.clip(v + 3.0, 0.0, 6.0) / 6.0, version="opset4")

    def hsigmoid(self, x):
        v = x.value
        return self.op("HSigmoid", [x], np.clip(v + 3.0, 0.0, 6.0) / 6.0, version="opset5")

    def reduce_mean(self, x, axes):
        return self.op("ReduceMean", [x, self.const(np.array(axes, np.int64), "i64")],
                       x.value.mean(axis=tuple(axes), keepdims=True), keep_dims=True)

    def reshape(self, x, shape, special_zero=True):
        target = [x.value.shape[i] if (d == 0 and special_zero) else d for i, d in enumerate(shape)]
        return self.op("Reshape", [x, self.const(np.array(shape, np.int64), "i64")],
                       x.value.reshape(target), special_zero=special_zero)

    def transpose(self, x, order):
        return self.op("Transpose", [x, self.const(np.array(order, np.int64), "i64")],
                       x.value.transpose(order))

    def maxpool(self, x, k):
        v = x.value
        p = k // 2
        padded = np.pad(v, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf)
        h, w = v.shape[2], v.shape[3]
        y = np.full(v.shape, -np.inf)
        for i in range(k):
            for j in range(k):
                y = np.maximum(y, padded[:, :, i:i + h, j:j + w])
        lyr = self.layer("MaxPool", "opset8", [x],
                         dict(strides=[1, 1], dilations=[1, 1], pads_begin=[p, p],
                              pads_end=[p, p], kernel=[k, k], rounding_type="floor",
                              auto_pad="explicit", index_element_type="i64", axis=0),
                         [y, np.zeros(y.shape)], ["f32", "i64"])
        return lyr.out(0)

    def concat(self, xs, axis=1):
        return self.op("Concat", xs, np.concatenate([x.value for x in xs], axis=axis), axis=axis)

    def split(self, x, n, axis=1):
        parts = np.split(x.value, n, axis=axis)
        lyr = self.layer("Split", "opset1", [x, self.const(np.array(axis, np.int64), "i64")],
                         {"num_splits": n}, parts)
        return [lyr.out(k) for k in range(n)]

    def variadic_split(self, x, lengths, axis=1):
        real = list(lengths)
        if -1 in real:
            real[real.index(-1)] = x.value.shape[axis] - sum(v for v in real if v != -1)
        parts = np.split(x.value, np.cumsum(real)[:-1], axis=axis)
        lyr = self.layer("VariadicSplit", "opset1",
                         [x, self.const(np.array(axis, np.int64), "i64"),
                          self.const(np.array(lengths, np.int64), "i64")], {}, parts)
        return [lyr.out(k) for k in range(len(lengths))]

    def upsample2x(self, x):
        """Interpolate opset11, nearest, scales 2 on H and W (YOLOv8's nn.Upsample)."""
        y = x.value.repeat(2, axis=2).repeat(2, axis=3)
        return self.op("Interpolate", [x, self.const(np.array([2.0, 2.0], np.float32)),
                                       self.const(np.array([2, 3], np.int64), "i64")],
                       y, version="opset11", mode="nearest", shape_calculation_mode="scales",
                       coordinate_transformation_mode="asymmetric", nearest_mode="floor",
                       antialias=False, pads_begin=[0, 0, 0, 0], pads_end=[0, 0, 0, 0],
                       cube_coeff=-0.75)

    def layer_norm(self, x, eps=1e-5):
        v = x.value
        mean = v.mean(axis=-1, keepdims=True)
        var = ((v - mean) ** 2).mean(axis=-1, keepdims=True)
        y = self.op("MVN", [x, self.const(np.array([-1], np.int64), "i64")],
                    (v - mean) / np.sqrt(var + eps), version="opset6",
                    eps=float(np.float32(eps)), normalize_variance=True, eps_mode="inside_sqrt")
        c = v.shape[-1]
        gamma = self.rng.uniform(0.5, 1.5, size=c).astype(np.float32)
        beta = self.rng.normal(0.0, 0.1, size=c).astype(np.float32)
        return self.add(self.mul(y, self.const(gamma)), self.const(beta))

    def gelu(self, x):
        v = x.value
        y = 0.5 * v * (1.0 + erf(v / math.sqrt(2.0)))
        if self.version == 10:
            return self.op("Gelu", [x], y, version="opset2")
        return self.op("Gelu", [x], y, version="opset7", approximation_mode="ERF")

    def softmax(self, x, axis):
        v = x.value
        e = np.exp(v - v.max(axis=axis, keepdims=True))
        y = e / e.sum(axis=axis, keepdims=True)
        if self.version == 10:
            return self.op("SoftMax", [x], y, axis=axis % v.ndim)
        return self.op("SoftMax", [x], y, version="opset8", axis=axis)

    def result(self, x):
        self.results.append(Layer(self, "Result", "opset1", self.uid("result"), [x], {}, [], [],
                                  []))
        return x

    # --- writing ------------------------------------------------------------
    def int8_layers(self):
        """Layers whose data input is quantized, counted from the network itself."""
        def quantized(port):
            while True:
                lyr = port.layer
                if lyr.type == "FakeQuantize":
                    return True
                if lyr.type not in DATA_MOVEMENT:
                    return False
                port = lyr.inputs[0]
        return sum(1 for lyr in self.layers if lyr.type in LAYERS and quantized(lyr.inputs[0]))

    def xml(self):
        ordered = self.params + self.layers + self.results
        ids = {id(lyr): i for i, lyr in enumerate(ordered)}
        out = ['<?xml version="1.0"?>', f'<net name="{self.name}" version="{self.version}">',
               "\t<layers>"]
        edges = []
        for lyr in ordered:
            out.append(f'\t\t<layer id="{ids[id(lyr)]}" name="{lyr.name}" type="{lyr.type}" '
                       f'version="{lyr.version}">')
            if lyr.data:
                attrs = " ".join(f'{k.replace("exclude_pad", "exclude-pad")}="{fmt(v)}"'
                                 for k, v in lyr.data.items())
                out.append(f"\t\t\t<data {attrs} />")
            port = 0
            if lyr.inputs:
                out.append("\t\t\t<input>")
                for src in lyr.inputs:
                    t = src.layer.out_types[src.index]
                    out.append(f'\t\t\t\t<port id="{port}" precision="{PRECISION[t]}">')
                    out += [f"\t\t\t\t\t<dim>{d}</dim>" for d in np.shape(src.value)]
                    out.append("\t\t\t\t</port>")
                    edges.append((ids[id(src.layer)], len(src.layer.inputs) + src.index,
                                  ids[id(lyr)], port))
                    port += 1
                out.append("\t\t\t</input>")
            if lyr.values:
                out.append("\t\t\t<output>")
                for k, v in enumerate(lyr.values):
                    names = ""
                    if self.version >= 11 and k < len(lyr.names):
                        names = f' names="{lyr.names[k]}"'
                    out.append(f'\t\t\t\t<port id="{port}" precision="{PRECISION[lyr.out_types[k]]}"'
                               f"{names}>")
                    out += [f"\t\t\t\t\t<dim>{d}</dim>" for d in np.shape(v)]
                    out.append("\t\t\t\t</port>")
                    port += 1
                out.append("\t\t\t</output>")
            out.append("\t\t</layer>")
        out.append("\t</layers>")
        out.append("\t<edges>")
        for e in sorted(edges, key=lambda e: e[0]):
            out.append(f'\t\t<edge from-layer="{e[0]}" from-port="{e[1]}" to-layer="{e[2]}" '
                       f'to-port="{e[3]}" />')
        out.append("\t</edges>")
        if self.version >= 11:
            out += ["\t<rt_info>", '\t\t<Runtime_version value="2023.3.0" />',
                    "\t\t<conversion_parameters>", '\t\t\t<is_python_object value="True" />',
                    "\t\t</conversion_parameters>", "\t</rt_info>"]
        out.append("</net>")
        return "\n".join(out) + "\n"


def ov_resnet_block():
    """IR v11: a ResNet basic block, compressed (with zero points) and FakeQuantized weights."""
    m = IrModel("ov_resnet_block", seed=41)
    x = m.fq_act(m.parameter("input", (1, 16, 16, 16)))
    y = m.fq_act(m.relu(m.conv(x, 32, stride=2, compressed=True)), unsigned=True)
    y = m.conv(y, 32)
    shortcut = m.conv(x, 32, k=1, stride=2, compressed=True, zero_point=True)
    y = m.fq_act(m.relu(m.add(y, shortcut)), unsigned=True)
    y = m.fq_act(m.reshape(m.reduce_mean(y, [2, 3]), [0, -1]), unsigned=True)
    m.result(m.dense(y, 10, compressed=True))
    return m


def ov_mobilenet_v3_block():
    """IR v11: MobileNetV3's inverted residual with squeeze-excitation (HSigmoid, HSwish)."""
    m = IrModel("ov_mobilenet_v3_block", seed=42)
    x = m.fq_act(m.parameter("input", (1, 16, 14, 14)))
    y = m.fq_act(m.hswish(m.conv(x, 48, k=1)))
    y = m.fq_act(m.hswish(m.conv(y, 48, group=48, compressed=True)))
    gate = m.fq_act(m.reduce_mean(y, [2, 3]))
    gate = m.fq_act(m.relu(m.conv(gate, 12, k=1)), unsigned=True)
    gate = m.hsigmoid(m.conv(gate, 48, k=1, compressed=True))
    y = m.fq_act(m.mul(y, gate))
    y = m.fq_act(m.conv(y, 16, k=1))
    m.result(m.fq_act(m.add(y, x)))
    return m


def ov_yolov8_block():
    """IR v11: YOLOv8 pieces: Conv+SiLU, a C2f (Split, VariadicSplit), SPPF, upsample + Concat."""
    m = IrModel("ov_yolov8_block", seed=43)
    x = m.fq_act(m.parameter("images", (1, 8, 16, 16)))
    p1 = m.fq_act(m.swish(m.conv(x, 16, stride=2, compressed=True)))
    # C2f: cv1, split in two, a bottleneck on the second half, concat, cv2.
    t = m.fq_act(m.swish(m.conv(p1, 16, k=1)))
    a, b = m.split(t, 2)
    c = m.fq_act(m.swish(m.conv(b, 8, compressed=True)))
    c = m.swish(m.conv(c, 8))
    c = m.add(c, b)
    t = m.fq_act(m.concat([a, b, c]))
    c2f = m.fq_act(m.swish(m.conv(t, 16, k=1, compressed=True)))
    # SPPF: cv1, three 5x5 max pools, concat, cv2.
    s = m.fq_act(m.swish(m.conv(c2f, 8, k=1)))
    p5 = m.maxpool(s, 5)
    p9 = m.maxpool(p5, 5)
    p13 = m.maxpool(p9, 5)
    s = m.fq_act(m.concat([s, p5, p9, p13]))
    s = m.fq_act(m.swish(m.conv(s, 16, k=1, compressed=True)))
    # Neck: nearest 2x upsample, concat with the stride-1 features, a conv.
    up = m.upsample2x(s)
    lo, hi = m.variadic_split(x, [4, -1])
    n = m.fq_act(m.concat([up, hi, lo]))
    m.result(m.swish(m.conv(n, 8, compressed=True)))
    return m


def ov_bert_layer():
    """IR v10: a BERT encoder layer (MatMul, SoftMax, MVN as LayerNorm, Gelu)."""
    m = IrModel("ov_bert_layer", seed=44, version=10)
    seq, hidden, heads = 16, 64, 4
    d = hidden // heads
    x = m.parameter("hidden_states", (1, seq, hidden))
    xq = m.fq_act(x)

    def heads_of(t, order):
        t = m.reshape(t, [0, 0, heads, d])
        return m.transpose(t, order)

    q = heads_of(m.fq_act(m.dense(xq, hidden, compressed=True)), [0, 2, 1, 3])
    k = heads_of(m.fq_act(m.dense(xq, hidden)), [0, 2, 3, 1])
    v = heads_of(m.fq_act(m.dense(xq, hidden, compressed=True)), [0, 2, 1, 3])
    scores = m.mul(m.matmul(q, k), m.const(np.array([1.0 / math.sqrt(d)], np.float32)))
    probs = m.fq_act(m.softmax(scores, -1), unsigned=True)
    ctx = m.transpose(m.matmul(probs, v), [0, 2, 1, 3])
    ctx = m.fq_act(m.reshape(ctx, [0, 0, hidden]))
    attn = m.add(m.dense(ctx, hidden), x)
    h = m.layer_norm(attn)
    ff = m.fq_act(m.gelu(m.dense(m.fq_act(h), 128, compressed=True)))
    out = m.add(m.dense(ff, hidden), h)
    m.result(m.layer_norm(out))
    return m


MODELS = [ov_resnet_block, ov_mobilenet_v3_block, ov_yolov8_block, ov_bert_layer]


def write_if_changed(path, data):
    if not os.path.exists(path) or open(path, "rb").read() != data:
        with open(path, "wb") as fh:
            fh.write(data)


def build(out_dir, only=None):
    for f in MODELS:
        if only and f.__name__ not in only:
            continue
        m = f()
        base = os.path.join(out_dir, f.__name__)
        write_if_changed(base + ".xml", m.xml().encode())
        write_if_changed(base + ".bin", bytes(m.bin))
        np.save(base + ".ov.input.npy", m.input_value)
        out = m.results[0].inputs[0].value
        np.save(base + ".ov.output.npy", out.astype(np.float32))
        write_if_changed(base + ".ov.int8_layers", f"{m.int8_layers()}\n".encode())
        print(f"corpus: {base}.xml (OpenVINO IR v{m.version}, {len(m.layers)} layers, "
              f"{m.int8_layers()} quantized layers, numpy reference)")
