"""Models in ONNX Runtime's QOperator format, with ONNX Runtime's own tensors.

`quantize_static(..., quant_format=QuantFormat.QOperator)` (and the ONNX Model
Zoo's -int8 models) writes each quantized operator as one node on 8-bit codes
instead of Q/DQ pairs around a float one. The models here are written as its
operators/*.py write them, from min/max calibration on one batch:
  input         QuantizeLinear "<x>_QuantizeLinear" -> "<x>_quantized", scalar
                "<x>_scale" and u8 "<x>_zero_point" (range widened to hold 0);
  Conv          QLinearConv "<node>_quant" (x, x_scale, x_zero_point, w,
                w_scale, w_zero_point, y_scale, y_zero_point, bias): s8
                weights per output channel, symmetric (scale max|w| / 127.5,
                zero points 0), int32 bias quantized with x_scale * w_scale[c];
                a Relu after it folded into its output range (zero point 0);
  Gemm          com.microsoft QGemm, the same inputs (bias third from last),
                transB kept, beta dropped;
  Add, Mul      com.microsoft QLinearAdd / QLinearMul (A, A_scale, A_zp, B,
                B_scale, B_zp, C_scale, C_zp), Relu folded as for Conv;
  Sigmoid, LeakyRelu, GlobalAveragePool (channels_last = 0), AveragePool,
  Concat (Y_scale, Y_zero_point first), Softmax (output 1/256, zero point 0,
                attribute opset): their com.microsoft QLinear operators;
  MaxPool, Flatten  on the codes themselves, keeping the input's grid;
  HardSwish     not quantized: DequantizeLinear -> HardSwish -> QuantizeLinear;
  output        DequantizeLinear "<y>_DequantizeLinear" onto the graph output.

Each model also gets `<name>.input.npy` (the graph input "input", which
bench/peers reads as the model's own input) and, when Node and
onnxruntime-node are at hand, `<name>.ort/`: every tensor ONNX Runtime 1.30
computes on that input with its graph optimizations disabled (each kernel as
written), as `<tensor>.npy`. tests/corpus compares qfuse with them layer by
layer. ONNX Runtime is looked for in $QFUSE_ORT_NODE_MODULES, then in
bench/peers/.ort (installed there by bench/peers/peers.py, or here by npm
unless offline); without it the directory is not written and the test says so.
"""

import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qdq_builder import conv2d, pool2d

MS = "com.microsoft"
HERE = os.path.dirname(os.path.abspath(__file__))
PEERS = os.path.join(HERE, "..", "..", "bench", "peers")


def u8_params(v):
    """ONNX Runtime's asymmetric u8 parameters of a calibrated range."""
    lo, hi = min(float(v.min()), 0.0), max(float(v.max()), 0.0)
    scale = np.float32((hi - lo) / 255.0 or 1.0)
    return scale, int(np.clip(np.round(-lo / scale), 0, 255))


def quantize(v, scale, zp):
    return np.clip(np.rint(v / np.float64(scale)) + zp, 0, 255)


class QOpModel:
    """A network under construction: nodes, initializers and the float value of
    every tensor on the calibration batch (activations as their codes
    dequantized, so each range is calibrated on what the quantized network
    computes)."""

    def __init__(self, name, seed):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.inputs, self.outputs = [], [], [], []
        self.values = {}  # float tensor name -> value
        self.q = {}  # float tensor name -> (codes tensor, scale name, zp name, scale, zp)
        self.count = 0

    def uid(self, base):
        self.count += 1
        return f"{base}{self.count}"

    def init(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op, inputs, outputs, name, **attrs):
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, **attrs))

    def quantized(self, t, v, params=None):
        """Records float tensor t as codes "<t>_quantized" on v's calibrated
        grid (or `params`, another tensor's), and v as their dequantization."""
        if params is None:
            scale, zp = u8_params(v)
            s = self.init(t + "_scale", np.float32(scale))
            z = self.init(t + "_zero_point", np.uint8(zp))
        else:
            _, s, z, scale, zp = params
        self.values[t] = ((quantize(v, scale, zp) - zp) * np.float64(scale))
        self.q[t] = (t + "_quantized", s, z, scale, zp)
        return self.q[t]

    def qin(self, t):
        """The (codes, scale, zero point) inputs of a quantized operator."""
        return list(self.q[t][:3])

    # --- graph ends ----------------------------------------------------------
    def input(self, shape):
        self.input_value = self.rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
        self.inputs.append(helper.make_tensor_value_info("input", TensorProto.FLOAT, list(shape)))
        codes, s, z, _, _ = self.quantized("input", self.input_value.astype(np.float64))
        self.node("QuantizeLinear", ["input", s, z], [codes], "input_QuantizeLinear")
        return "input"

    def output(self, t):
        codes, s, z, _, _ = self.q[t]
        self.node("DequantizeLinear", [codes, s, z], ["output"], t + "_DequantizeLinear")
        self.outputs.append(helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                                          list(self.values[t].shape)))

    # --- layers --------------------------------------------------------------
    def weights(self, w, base):
        """s8 per output channel (axis 0), symmetric: max|w| / 127.5."""
        scale = (np.abs(w).reshape(w.shape[0], -1).max(axis=1) / 127.5).astype(np.float32)
        scale[scale == 0] = 1.0
        shape = (-1,) + (1,) * (w.ndim - 1)
        q = np.clip(np.rint(w / scale.reshape(shape)), -128, 127).astype(np.int8)
        names = [self.init(base + "_quantized", q), self.init(base + "_scale", scale),
                 self.init(base + "_zero_point", np.zeros(w.shape[0], np.int8))]
        return names, q.astype(np.float64) * scale.reshape(shape).astype(np.float64), scale

    def bias(self, b, x_scale, w_scale, base):
        """int32, quantized with x_scale * w_scale[c] (quantize_bias_static)."""
        bs = (np.float32(x_scale) * w_scale).astype(np.float32)
        q = np.round(b / bs).astype(np.int32)
        return self.init(base + "_quantized", q), q.astype(np.float64) * bs

    def conv(self, x, oc, k=3, stride=1, group=1, relu=False):
        n = self.uid("conv")
        ic = self.values[x].shape[1]
        w = self.rng.normal(0.0, 1.0 / np.sqrt(ic // group * k * k),
                            size=(oc, ic // group, k, k)).astype(np.float32)
        b = self.rng.normal(0.0, 0.1, size=oc).astype(np.float32)
        wn, wf, ws = self.weights(w, n + "_W")
        bn, bf = self.bias(b, self.q[x][3], ws, n + "_B")
        p = k // 2
        y = conv2d(self.values[x], wf, bf, [stride] * 2, [p] * 4, [1, 1], group)
        if relu:
            y = np.maximum(y, 0.0)
        t = n + "_out"
        codes, s, z, _, _ = self.quantized(t, y)
        self.node("QLinearConv", self.qin(x) + wn + [s, z, bn], [codes], n + "_quant",
                  kernel_shape=[k, k], pads=[p] * 4, strides=[stride] * 2, group=group,
                  dilations=[1, 1])
        return t

    def gemm(self, x, n_out, relu=False):
        n = self.uid("gemm")
        k = self.values[x].shape[1]
        w = self.rng.normal(0.0, 1.0 / np.sqrt(k), size=(n_out, k)).astype(np.float32)
        b = self.rng.normal(0.0, 0.1, size=n_out).astype(np.float32)
        wn, wf, ws = self.weights(w, n + "_W")
        bn, bf = self.bias(b, self.q[x][3], ws, n + "_B")
        y = self.values[x] @ wf.T + bf
        if relu:
            y = np.maximum(y, 0.0)
        t = n + "_out"
        codes, s, z, _, _ = self.quantized(t, y)
        self.node("QGemm", self.qin(x) + wn + [bn, s, z], [codes], n + "_quant", domain=MS,
                  transB=1, alpha=1.0)
        return t

    # --- elementwise -----------------------------------------------------------
    def binary(self, op, a, b, relu=False):
        n = self.uid(op.lower())
        y = (self.values[a] + self.values[b]) if op == "Add" else self.values[a] * self.values[b]
        if relu:
            y = np.maximum(y, 0.0)
        t = n + "_out"
        codes, s, z, _, _ = self.quantized(t, y)
        self.node("QLinear" + op, self.qin(a) + self.qin(b) + [s, z], [codes], n + "_quant",
                  domain=MS)
        return t

    def activation(self, op, x, fn, **attrs):
        n = self.uid(op.lower())
        t = n + "_out"
        codes, s, z, _, _ = self.quantized(t, fn(self.values[x]))
        self.node("QLinear" + op, self.qin(x) + [s, z], [codes], n + "_quant", domain=MS,
                  **attrs)
        return t

    def sigmoid(self, x):
        return self.activation("Sigmoid", x, lambda v: 1.0 / (1.0 + np.exp(-v)))

    def leaky_relu(self, x, alpha=0.1):
        return self.activation("LeakyRelu", x, lambda v: np.where(v >= 0, v, alpha * v),
                               alpha=alpha)

    def silu(self, x):
        """YOLOv5's SiLU as the quantizer leaves it: x * Sigmoid(x), two operators."""
        return self.binary("Mul", x, self.sigmoid(x))

    def hardswish(self, x):
        """Not quantized: DequantizeLinear -> HardSwish -> QuantizeLinear."""
        n = self.uid("hardswish")
        codes, s, z, _, _ = self.q[x]
        self.node("DequantizeLinear", [codes, s, z], [x], x + "_DequantizeLinear")
        t = n + "_out"
        v = self.values[x]
        codes, s, z, _, _ = self.quantized(t, v * np.clip(v + 3.0, 0.0, 6.0) / 6.0)
        self.node("HardSwish", [x], [t], n)
        self.node("QuantizeLinear", [t, s, z], [codes], t + "_QuantizeLinear")
        return t

    # --- pooling and data movement ---------------------------------------------
    def max_pool(self, x, k=2, stride=2):
        n = self.uid("maxpool")
        t = n + "_out"
        y = pool2d(self.values[x], [k, k], [stride] * 2, [0] * 4, "max")
        codes, _, _, _, _ = self.quantized(t, y, params=self.q[x])
        self.node("MaxPool", [self.q[x][0]], [codes], n, kernel_shape=[k, k], strides=[stride] * 2)
        return t

    def avg_pool(self, x, k=3, stride=1):
        n = self.uid("avgpool")
        t = n + "_out"
        p = k // 2
        y = pool2d(self.values[x], [k, k], [stride] * 2, [p] * 4, "avg")
        codes, s, z, _, _ = self.quantized(t, y)
        self.node("QLinearAveragePool", self.qin(x) + [s, z], [codes], n + "_quant", domain=MS,
                  kernel_shape=[k, k], pads=[p] * 4, strides=[stride] * 2)
        return t

    def global_avg_pool(self, x):
        n = self.uid("gap")
        t = n + "_out"
        codes, s, z, _, _ = self.quantized(t, self.values[x].mean(axis=(2, 3), keepdims=True))
        self.node("QLinearGlobalAveragePool", self.qin(x) + [s, z], [codes], n + "_quant",
                  domain=MS, channels_last=0)
        return t

    def concat(self, xs, axis=1):
        n = self.uid("concat")
        t = n + "_out"
        codes, s, z, _, _ = self.quantized(t, np.concatenate([self.values[x] for x in xs], axis))
        inputs = [s, z]
        for x in xs:
            inputs += self.qin(x)
        self.node("QLinearConcat", inputs, [codes], n + "_quant", domain=MS, axis=axis)
        return t

    def flatten(self, x):
        n = self.uid("flatten")
        t = n + "_out"
        v = self.values[x]
        codes, _, _, _, _ = self.quantized(t, v.reshape(v.shape[0], -1), params=self.q[x])
        self.node("Flatten", [self.q[x][0]], [codes], n, axis=1)
        return t

    def softmax(self, x):
        n = self.uid("softmax")
        t = n + "_out"
        v = self.values[x]
        e = np.exp(v - v.max(axis=-1, keepdims=True))
        s = self.init(t + "_scale", np.float32(1.0 / 256.0))
        z = self.init(t + "_zero_point", np.uint8(0))
        codes, _, _, _, _ = self.quantized(
            t, e / e.sum(axis=-1, keepdims=True), params=(None, s, z, np.float32(1 / 256.0), 0))
        self.node("QLinearSoftmax", self.qin(x) + [s, z], [codes], n + "_quant", domain=MS,
                  axis=-1, opset=14)
        return t

    def model(self):
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        m = helper.make_model(graph, producer_name="onnx.quantize",
                              opset_imports=[helper.make_opsetid("", 14),
                                             helper.make_opsetid(MS, 1)])
        m.ir_version = 8
        return m


def qop_resnet():
    """ResNet-style CNN: QLinearConv (+ Relu folded), MaxPool on u8, two
    residual blocks with QLinearAdd (Relu folded), QLinearGlobalAveragePool,
    Flatten on u8 and a QGemm classifier."""
    m = QOpModel("qop_resnet", seed=41)
    x = m.conv(m.input((1, 3, 32, 32)), 16, relu=True)
    x = m.max_pool(x)
    y = m.conv(m.conv(x, 16, relu=True), 16)
    x = m.binary("Add", y, x, relu=True)
    x = m.conv(x, 32, stride=2, relu=True)
    y = m.conv(m.conv(x, 32, relu=True), 32)
    x = m.binary("Add", y, x, relu=True)
    x = m.flatten(m.global_avg_pool(x))
    m.output(m.gemm(x, 10))
    return m


def qop_mobilenetv3_block():
    """MobileNetV3-style inverted residual: 1x1 expansion and depthwise 3x3
    with HardSwish left in float between DequantizeLinear and QuantizeLinear,
    squeeze-excitation (QLinearGlobalAveragePool, 1x1 QLinearConvs,
    QLinearSigmoid, QLinearMul by the channel gate), 1x1 projection and the
    QLinearAdd residual."""
    m = QOpModel("qop_mobilenetv3_block", seed=42)
    x = m.conv(m.input((1, 16, 16, 16)), 16, k=1)
    y = m.hardswish(m.conv(x, 48, k=1))
    y = m.hardswish(m.conv(y, 48, group=48))
    gate = m.sigmoid(m.conv(m.conv(m.global_avg_pool(y), 12, k=1, relu=True), 48, k=1))
    y = m.binary("Mul", y, gate)
    y = m.conv(y, 16, k=1)
    m.output(m.binary("Add", y, x))
    return m


def qop_yolo_block():
    """YOLO-ish CSP block: SiLU as QLinearSigmoid + QLinearMul, a
    QLinearLeakyRelu branch, QLinearConcat of branches on different grids, a
    QLinearAveragePool, then MaxPool on u8."""
    m = QOpModel("qop_yolo_block", seed=43)
    x = m.silu(m.conv(m.input((1, 8, 32, 32)), 16))
    a = m.silu(m.conv(x, 8, k=1))
    b = m.leaky_relu(m.conv(x, 8), alpha=0.1)
    c = m.avg_pool(x)
    y = m.concat([a, b, c])
    y = m.silu(m.conv(y, 16, k=1))
    m.output(m.max_pool(y))
    return m


def qop_classifier():
    """A small classifier head: QGemm with Relu folded, a second QGemm, and
    QLinearSoftmax over the classes (output grid 1/256, zero point 0)."""
    m = QOpModel("qop_classifier", seed=44)
    x = m.gemm(m.input((4, 64)), 32, relu=True)
    m.output(m.softmax(m.gemm(x, 10)))
    return m


MODELS = [qop_resnet, qop_mobilenetv3_block, qop_yolo_block, qop_classifier]


def ort_node_modules(offline):
    """Where onnxruntime-node is, installing it as bench/peers does unless offline."""
    given = os.environ.get("QFUSE_ORT_NODE_MODULES")
    if given and os.path.isdir(os.path.join(given, "onnxruntime-node")):
        return given
    local = os.path.join(PEERS, ".ort", "node_modules")
    if os.path.isdir(os.path.join(local, "onnxruntime-node")):
        return local
    if offline or shutil.which("node") is None or shutil.which("npm") is None:
        return None
    sys.path.insert(0, PEERS)
    try:
        import peers  # noqa: E402
        peers.ensure_ort()
    except Exception as e:  # noqa: BLE001 - any failure leaves the data out
        print(f"corpus: onnxruntime-node not installed ({e})")
        return None
    return local if os.path.isdir(os.path.join(local, "onnxruntime-node")) else None


def every_tensor_model(model):
    """The model with every tensor a node writes also a graph output."""
    m = onnx.shape_inference.infer_shapes(model)
    known = {vi.name: vi for vi in m.graph.value_info}
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for t in n.output:
            if not t or t in have:
                continue
            # Shape inference knows no com.microsoft operator: their outputs
            # are the u8 codes "<tensor>_quantized", of no declared shape.
            m.graph.output.append(known[t] if t in known else helper.make_tensor_value_info(
                t, TensorProto.UINT8 if t.endswith("_quantized") else TensorProto.FLOAT, None))
            have.add(t)
    return m


def write_ort_tensors(model, path, input_npy, out_dir, node_modules):
    """ONNX Runtime's every tensor on the input, optimizations disabled."""
    with tempfile.TemporaryDirectory() as tmp:
        full = os.path.join(tmp, "every_tensor.onnx")
        onnx.save(every_tensor_model(model), full)
        inputs = os.path.join(tmp, "inputs")
        os.makedirs(inputs)
        shutil.copyfile(input_npy, os.path.join(inputs, "input.npy"))
        out = os.path.join(tmp, "ort")
        p = subprocess.run(["node", os.path.join(PEERS, "ort_run.js"), full, inputs, out, "1", "0",
                            "disabled"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=dict(os.environ, NODE_PATH=node_modules))
        if p.returncode != 0:
            print(f"corpus: ONNX Runtime failed on {path}: {p.stderr[-500:]}")
            return False
        if os.path.isdir(out_dir):
            shutil.rmtree(out_dir)
        shutil.copytree(out, out_dir)
    return True


def build(out_dir, only=None, offline=False):
    node_modules = None
    for f in MODELS:
        if only and f.__name__ not in only:
            continue
        net = f()
        model = net.model()
        onnx.checker.check_model(model)
        data = model.SerializeToString()
        path = os.path.join(out_dir, f.__name__ + ".onnx")
        changed = not os.path.exists(path) or open(path, "rb").read() != data
        if changed:
            with open(path, "wb") as fh:
                fh.write(data)
        input_npy = os.path.join(out_dir, f.__name__ + ".input.npy")
        np.save(input_npy, net.input_value)
        ort_dir = os.path.join(out_dir, f.__name__ + ".ort")
        note = "ONNX Runtime's tensors kept"
        if changed or not os.path.isdir(ort_dir):
            if node_modules is None:
                node_modules = ort_node_modules(offline) or ""
            if not node_modules:
                note = "no ONNX Runtime at hand: its tensors left out"
            elif write_ort_tensors(model, path, input_npy, ort_dir, node_modules):
                note = "ONNX Runtime's tensors written"
            else:
                note = "ONNX Runtime failed: its tensors left out"
            if not note.endswith("written") and os.path.isdir(ort_dir):
                shutil.rmtree(ort_dir)
        print(f"corpus: {path} (QOperator format, {len(model.graph.node)} nodes; {note})")
