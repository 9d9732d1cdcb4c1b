"""Models in NNCF's ONNX export form, with numpy's output for one input.

NNCF (OpenVINO's training-time compression framework) exports every quantizer
as a node FakeQuantize(X, input_low, input_high, output_low, output_high) of
domain org.openvinotoolkit, with attribute `levels`, and output limits equal to
the input limits. Its symmetric quantizer (quantize_functions.py) has one
trainable scale s per tensor or per channel and writes:
  activations  levels 256, per tensor: after a Relu unsigned, [0, s];
               otherwise signed, [-s * 128 / 127, s] (zero is level 128);
  weights      levels 255 ("narrow range"), per output channel, limits of
               shape [C, 1, 1, 1] (a Gemm's: [C, 1]): [-s_c, s_c].
Here s is the calibration batch's max |x| (weights: per channel), as NNCF's
initializer sets it before training.

Each model also gets `<name>.nncf.input.npy` and `<name>.nncf.output.npy`: the
network run by numpy in float64 with FakeQuantize as the seed defines it
(below min(il, ih) output_low, above max(il, ih) output_high, else
round_half_even((x - il) / (ih - il) * (L - 1)) / (L - 1) * (oh - ol) + ol),
an independent reference for qfuse's unfused path.
"""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qdq_builder import conv2d

DOMAIN = "org.openvinotoolkit"


def fake_quantize(x, il, ih, ol, oh, levels):
    """The seed's FakeQuantize in float64, limits broadcast like numpy."""
    x = x.astype(np.float64)
    il, ih, ol, oh = (np.asarray(v, np.float64) for v in (il, ih, ol, oh))
    q = np.rint((x - il) / (ih - il) * (levels - 1))  # rint: half to even
    y = q / (levels - 1) * (oh - ol) + ol
    y = np.where(x <= np.minimum(il, ih), ol, y)
    return np.where(x > np.maximum(il, ih), oh, y)


class NncfModel:
    """A network under construction: ONNX nodes and numpy values of one input."""

    def __init__(self, name, seed):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.inputs, self.outputs = [], [], [], []
        self.values = {}
        self.count = 0

    def uid(self, base):
        self.count += 1
        return f"{base}_{self.count}"

    def init(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def node(self, op, inputs, name, value, domain="", **attrs):
        out = name + "_output"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, domain=domain, **attrs))
        self.values[out] = value
        return out

    def input(self, name, shape):
        self.values[name] = self.rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def fq(self, x, low, high, levels, shape=()):
        """FakeQuantize with limits [low, high] (output limits the same)."""
        base = self.uid(x.split("_output")[0] + "/fq")
        lo = np.asarray(low, np.float32).reshape(shape)
        hi = np.asarray(high, np.float32).reshape(shape)
        names = [self.init(f"{base}/{k}", v) for k, v in
                 (("input_low", lo), ("input_high", hi), ("output_low", lo), ("output_high", hi))]
        y = fake_quantize(self.values[x], lo, hi, lo, hi, levels)
        return self.node("FakeQuantize", [x] + names, base + "/FakeQuantize", y, domain=DOMAIN,
                         levels=levels)

    def fq_activation(self, x, unsigned):
        s = float(np.abs(self.values[x]).max()) or 1.0
        return self.fq(x, 0.0 if unsigned else -s * 128.0 / 127.0, s, 256)

    def fq_weights(self, w):
        """Per-output-channel, 255 levels, [-s_c, s_c]."""
        name = self.init(self.uid("weight"), w)
        self.values[name] = w
        red = tuple(range(1, w.ndim))
        s = np.abs(w).max(axis=red).astype(np.float32)
        s[s == 0] = 1.0
        shape = (w.shape[0],) + (1,) * (w.ndim - 1)
        return self.fq(name, -s, s, 255, shape)

    def conv(self, x, oc, k=3, stride=1, group=1):
        ic = self.values[x].shape[1]
        w = self.rng.normal(0.0, 1.0 / np.sqrt(ic // group * k * k),
                            size=(oc, ic // group, k, k)).astype(np.float32)
        b = self.rng.normal(0.0, 0.1, size=oc).astype(np.float32)
        wq = self.fq_weights(w)
        bn = self.init(self.uid("bias"), b)
        p = k // 2
        y = conv2d(self.values[x].astype(np.float64), self.values[wq], b, [stride] * 2, [p] * 4,
                   [1, 1], group)
        return self.node("Conv", [x, wq, bn], self.uid("conv"), y, kernel_shape=[k, k],
                         pads=[p] * 4, strides=[stride] * 2, group=group)

    def relu(self, x):
        return self.node("Relu", [x], self.uid("relu"), np.maximum(self.values[x], 0.0))

    def add(self, a, b):
        return self.node("Add", [a, b], self.uid("add"), self.values[a] + self.values[b])

    def hardswish(self, x):
        v = self.values[x]
        return self.node("HardSwish", [x], self.uid("hardswish"),
                         v * np.clip(v / 6.0 + 0.5, 0.0, 1.0))

    def global_pool(self, x):
        v = self.values[x]
        return self.node("GlobalAveragePool", [x], self.uid("gap"),
                         v.mean(axis=(2, 3), keepdims=True))

    def flatten(self, x):
        v = self.values[x]
        return self.node("Flatten", [x], self.uid("flatten"), v.reshape(v.shape[0], -1))

    def gemm(self, x, n):
        k = self.values[x].shape[1]
        w = self.rng.normal(0.0, 1.0 / np.sqrt(k), size=(n, k)).astype(np.float32)
        b = self.rng.normal(0.0, 0.1, size=n).astype(np.float32)
        wq = self.fq_weights(w)
        bn = self.init(self.uid("bias"), b)
        y = self.values[x].astype(np.float64) @ self.values[wq].T + b
        return self.node("Gemm", [x, wq, bn], self.uid("gemm"), y, transB=1)

    def output(self, x):
        self.outputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT,
                                                          list(self.values[x].shape)))
        return x

    def model(self):
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14),
                                                    helper.make_opsetid(DOMAIN, 1)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def nncf_resnet_block():
    """NNCF: a ResNet basic block with a projection shortcut, pool and classifier."""
    m = NncfModel("nncf_resnet_block", seed=31)
    x = m.fq_activation(m.input("input", (1, 16, 16, 16)), unsigned=False)
    y = m.fq_activation(m.relu(m.conv(x, 32, stride=2)), unsigned=True)
    y = m.conv(y, 32)
    shortcut = m.conv(x, 32, k=1, stride=2)
    y = m.fq_activation(m.relu(m.add(y, shortcut)), unsigned=True)
    y = m.fq_activation(m.flatten(m.global_pool(y)), unsigned=True)
    m.output(m.gemm(y, 10))
    return m


def nncf_mobilenet_block():
    """NNCF: MobileNetV3's inverted residual (1x1, depthwise 3x3, hardswish, 1x1)."""
    m = NncfModel("nncf_mobilenet_block", seed=32)
    x = m.fq_activation(m.input("input", (1, 16, 20, 20)), unsigned=False)
    y = m.fq_activation(m.hardswish(m.conv(x, 48, k=1)), unsigned=False)
    y = m.fq_activation(m.hardswish(m.conv(y, 48, group=48)), unsigned=False)
    y = m.fq_activation(m.conv(y, 16, k=1), unsigned=False)
    m.output(m.fq_activation(m.add(y, x), unsigned=False))
    return m


MODELS = [nncf_resnet_block, nncf_mobilenet_block]


def build(out_dir, only=None):
    for f in MODELS:
        if only and f.__name__ not in only:
            continue
        net = f()
        data = net.model().SerializeToString()
        path = os.path.join(out_dir, f.__name__ + ".onnx")
        if not os.path.exists(path) or open(path, "rb").read() != data:
            with open(path, "wb") as fh:
                fh.write(data)
        np.save(os.path.join(out_dir, f.__name__ + ".nncf.input.npy"), net.values["input"])
        out = net.outputs[0].name
        np.save(os.path.join(out_dir, f.__name__ + ".nncf.output.npy"),
                net.values[out].astype(np.float32))
        print(f"corpus: {path} (NNCF FakeQuantize export, {len(net.nodes)} nodes, "
              "numpy reference)")
