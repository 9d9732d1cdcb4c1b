#!/usr/bin/env python3
"""Exports small PyTorch 1.13 QAT networks to ONNX QDQ, as users' torch exports look.

    python3 tools/corpus/torch_qat.py OUT_DIR

Needs Debian's python3-torch (1.13). The default QAT qconfig inserts a fused
observer that torch.onnx.export refuses, so the qconfig here is built from
FakeQuantize with MovingAverageMinMaxObserver (activations, quint8 0..255) and
MovingAveragePerChannelMinMaxObserver (weights, qint8, per-channel symmetric);
it exports at opset 13 as QuantizeLinear/DequantizeLinear pairs with
1-element scale and zero-point tensors. Conv-BN pairs are fused for QAT
(ConvBnReLU2d), which torch exports as Conv -> Div(per-channel) ->
BatchNormalization. ConvTranspose is not covered by prepare_qat; explicit
fake_quantize calls around it export the same way.

Deterministic: fixed seeds, a few calibration steps on random data. The
outputs are small and committed under tools/corpus/torch/, so that building
the corpus does not need torch. The torchvision architectures (MobileNetV2, a
ResNet of torchvision's BasicBlocks, ...) need python3-torchvision too.
"""

import os
import sys

import torch
import torch.nn as nn
import torch.ao.quantization as tq


def qat_qconfig(act_max=255):
    """act_max=127: torch's default x86 ("fbgemm") activations, reduce_range's
    quint8 0..127, which torch exports as QuantizeLinear -> Clip -> DequantizeLinear."""
    act = tq.FakeQuantize.with_args(observer=tq.MovingAverageMinMaxObserver, quant_min=0,
                                    quant_max=act_max, dtype=torch.quint8,
                                    qscheme=torch.per_tensor_affine)
    weight = tq.FakeQuantize.with_args(observer=tq.MovingAveragePerChannelMinMaxObserver,
                                       quant_min=-128, quant_max=127, dtype=torch.qint8,
                                       qscheme=torch.per_channel_symmetric, ch_axis=0)
    return tq.QConfig(activation=act, weight=weight)


class ConvBnNet(nn.Module):
    """conv-bn-relu x2, a residual add, global pool and a linear head."""

    def __init__(self):
        super().__init__()
        self.quant = tq.QuantStub()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1, groups=4)
        self.bn2 = nn.BatchNorm2d(16)
        self.relu2 = nn.ReLU()
        self.add = nn.quantized.FloatFunctional()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)
        self.dequant = tq.DeQuantStub()

    def forward(self, x):
        x = self.quant(x)
        a = self.relu1(self.bn1(self.conv1(x)))
        b = self.relu2(self.bn2(self.conv2(a)))
        s = self.add.add(a, b)
        y = self.fc(torch.flatten(self.pool(s), 1))
        return self.dequant(y)

    def fuse(self):
        tq.fuse_modules_qat(self, [["conv1", "bn1", "relu1"], ["conv2", "bn2", "relu2"]],
                            inplace=True)


class DeconvNet(nn.Module):
    """Conv encoder and a ConvTranspose decoder with explicit fake quantization."""

    def __init__(self):
        super().__init__()
        self.quant = tq.QuantStub()
        self.conv = nn.Conv2d(1, 8, 3, stride=2, padding=1)
        self.relu = nn.ReLU()
        self.deconv = nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1)
        self.dequant = tq.DeQuantStub()

    def forward(self, x):
        x = self.quant(x)
        h = self.dequant(self.relu(self.conv(x)))
        # ConvTranspose: activations per tensor u8, weights per channel (axis 1).
        h = torch.fake_quantize_per_tensor_affine(h, self.h_scale, self.h_zp, 0, 255)
        w = torch.fake_quantize_per_channel_affine(
            self.deconv.weight, self.w_scale, torch.zeros(4, dtype=torch.int32), 1, -128, 127)
        y = nn.functional.conv_transpose2d(h, w, self.deconv.bias, stride=2, padding=1)
        return torch.fake_quantize_per_tensor_affine(y, self.y_scale, self.y_zp, 0, 255)

    def fuse(self):
        tq.fuse_modules_qat(self, [["conv", "relu"]], inplace=True)


def prepared(net, seed):
    """`net` built from `seed`, its conv-bn(-relu) runs fused, prepared for QAT."""
    torch.manual_seed(seed)
    m = net()
    m.train()
    m.fuse()
    m.qconfig = qat_qconfig()
    tq.prepare_qat(m, inplace=True)
    return m


def calibrate(model, shape, steps=8):
    model.train()
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        model(torch.rand(shape, generator=g) * 2 - 1)
    model.eval()


def export(model, shape, path):
    torch.onnx.export(model, torch.zeros(shape), path, opset_version=13,
                      input_names=["input"], output_names=["output"], do_constant_folding=True)
    print(f"torch_qat: {path}")


def conv_bn_net(out):
    m = prepared(ConvBnNet, seed=1)
    calibrate(m, (2, 3, 16, 16))
    m.apply(tq.disable_observer)
    export(m, (1, 3, 16, 16), os.path.join(out, "torch_qat_conv_bn.onnx"))


def deconv_net(out):
    m = prepared(DeconvNet, seed=2)
    # Ranges of the explicit fake quantizations, from one float pass.
    with torch.no_grad():
        x = torch.rand((2, 1, 16, 16), generator=torch.Generator().manual_seed(0)) * 2 - 1
        h = torch.relu(m.conv(m.quant(x)))
        hmax = float(h.max())
        m.h_scale, m.h_zp = hmax / 255.0, 0
        w = m.deconv.weight
        m.w_scale = (w.abs().amax(dim=(0, 2, 3)) / 127.0).float()
        y = nn.functional.conv_transpose2d(h, w, m.deconv.bias, stride=2, padding=1)
        lo, hi = min(float(y.min()), 0.0), max(float(y.max()), 0.0)
        m.y_scale = (hi - lo) / 255.0
        m.y_zp = int(round(-lo / m.y_scale))
    calibrate(m, (2, 1, 16, 16))
    m.apply(tq.disable_observer)
    export(m, (1, 1, 16, 16), os.path.join(out, "torch_qat_deconv.onnx"))


# --- torchvision architectures -------------------------------------------------
#
# torchvision's quantizable networks (Debian's python3-torchvision 0.14), at
# small widths and 10 classes so that the exports stay small: seeded weights,
# BatchNorm statistics calibrated on data in float, conv-bn(-relu) folded
# (fuse_model), QAT-prepared, and the observers run over calibration batches
# with the weights as exported. A weight observer then holds each channel's
# exact extreme, and the per-channel symmetric scale max|w| / 127.5 puts
# that weight on w / s = +-127.5: the ties ONNX rounds to -128.


class QuantizableResNet8(nn.Module):
    """A ResNet of torchvision's quantizable BasicBlocks at widths 16, 32, 64."""

    def __init__(self, num_classes=10):
        super().__init__()
        from torchvision.models.quantization.resnet import QuantizableBasicBlock as Block
        self.quant = tq.QuantStub()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU()
        layers = []
        inplanes = 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            down = None
            if stride != 1 or inplanes != planes:
                down = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                     nn.BatchNorm2d(planes))
            layers.append(Block(inplanes, planes, stride, down))
            inplanes = planes
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)
        self.dequant = tq.DeQuantStub()

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(self.quant(x))))
        x = self.layers(x)
        return self.dequant(self.fc(torch.flatten(self.pool(x), 1)))

    def fuse_model(self, is_qat=None):
        tq.fuse_modules(self, [["conv1", "bn1", "relu"]], inplace=True)
        for block in self.layers:
            block.fuse_model(is_qat)


def mobilenet_v3(arch, width_mult):
    from torchvision.models import mobilenetv3
    from torchvision.models.quantization import mobilenetv3 as qm3
    setting, last = mobilenetv3._mobilenet_v3_conf(arch, width_mult=width_mult)
    return qm3.QuantizableMobileNetV3(setting, last, num_classes=10,
                                      block=qm3.QuantizableInvertedResidual)


def torchvision_nets():
    from torchvision.models import quantization as qm
    return [
        ("torch_qat_mobilenet_v2",
         lambda: qm.mobilenet_v2(weights=None, quantize=False, width_mult=0.35, num_classes=10),
         (1, 3, 64, 64)),
        ("torch_qat_resnet8", QuantizableResNet8, (1, 3, 32, 32)),
        # Squeeze-excitation: pool -> fc1 -> relu -> fc2 -> hardsigmoid -> x * gate.
        ("torch_qat_mobilenet_v3_small", lambda: mobilenet_v3("mobilenet_v3_small", 0.75),
         (1, 3, 128, 128)),
        ("torch_qat_mobilenet_v3_large", lambda: mobilenet_v3("mobilenet_v3_large", 0.5),
         (1, 3, 128, 128)),
        # Channel shuffle: Concat of two grids -> Reshape -> Transpose -> Reshape -> Slice.
        ("torch_qat_shufflenet_v2",
         lambda: qm.shufflenet_v2_x0_5(weights=None, quantize=False, num_classes=10),
         (1, 3, 128, 128)),
        # fbgemm's activations (0..127): Q -> Clip(max 127) -> DQ around every tensor.
        ("torch_qat_resnet8_reduce_range", QuantizableResNet8, (1, 3, 32, 32), 127),
    ]


def torchvision_net(out, name, build, shape, seed, act_max=255):
    torch.manual_seed(seed)
    m = build()
    g = torch.Generator().manual_seed(seed)
    batch = (8,) + shape[1:]
    with torch.no_grad():
        m.train()
        for _ in range(8):  # BatchNorm statistics from data
            m(torch.rand(batch, generator=g) * 2 - 1)
    m.eval()
    m.fuse_model(is_qat=False)  # conv-bn(-relu) folded as at inference
    m.qconfig = qat_qconfig(act_max)
    m.train()
    tq.prepare_qat(m, inplace=True)
    with torch.no_grad():
        for _ in range(4):  # observers over calibration batches; weights as exported
            m(torch.rand(batch, generator=g) * 2 - 1)
    m.apply(tq.disable_observer)
    m.eval()
    export(m, shape, os.path.join(out, name + ".onnx"))


# Networks with no quantizable variant (EfficientNet, ShuffleNetV2's plain
# form, a YOLOv8-style detector) get their fake quantizers from FX graph mode,
# with the same qconfig, as a user does for an arbitrary module: SiLU, the
# sigmoid gate and its multiply, torch.chunk's outputs and each Concat input
# included. Sigmoid keeps FX's fixed grid (scale 1/256, zero point 0), which
# FX requires.
def fx_qat(m, out, name, shape, seed):
    from torch.ao.quantization import quantize_fx
    from torch.ao.quantization.qconfig_mapping import _FIXED_QPARAMS_OP_TO_OBSERVER
    g = torch.Generator().manual_seed(seed)
    batch = (8,) + shape[1:]
    with torch.no_grad():
        m.train()
        for _ in range(8):  # BatchNorm statistics from data
            m(torch.rand(batch, generator=g) * 2 - 1)
    m.eval()
    mapping = tq.QConfigMapping().set_global(qat_qconfig())
    for op, observer in _FIXED_QPARAMS_OP_TO_OBSERVER.items():
        fixed = tq.FixedQParamsFakeQuantize.with_args(observer=observer)
        mapping.set_object_type(op, tq.QConfig(activation=fixed, weight=qat_qconfig().weight))
    m.train()
    m = quantize_fx.prepare_qat_fx(m, mapping, (torch.zeros(shape),))
    with torch.no_grad():
        for _ in range(4):
            m(torch.rand(batch, generator=g) * 2 - 1)
    m.apply(tq.disable_observer)
    m.eval()
    export(m, shape, os.path.join(out, name + ".onnx"))


def efficientnet_b0_fx(out, seed):
    from torchvision.models import efficientnet as en
    torch.manual_seed(seed)
    setting, last = en._efficientnet_conf("efficientnet_b0", width_mult=0.5, depth_mult=0.5)
    m = en.EfficientNet(setting, 0.2, stochastic_depth_prob=0.0, last_channel=last,
                        num_classes=10)  # stochastic depth off: FX traces in training mode
    fx_qat(m, out, "torch_qat_efficientnet_b0", (1, 3, 128, 128), seed)


def shufflenet_v2_fx(out, seed):
    """torchvision's plain ShuffleNetV2: torch.chunk (exported as Split), the
    channel shuffle, and a Concat of a branch's input with its output on two grids."""
    from torchvision.models import shufflenetv2

    # FX on Python 3.11 cannot unpack x.size() or chunk(); the same steps by indexing.
    def channel_shuffle(x, groups: int):
        n, c = x.shape[0], x.shape[1]
        x = x.view(n, groups, c // groups, x.shape[2], x.shape[3])
        return torch.transpose(x, 1, 2).contiguous().view(n, -1, x.shape[3], x.shape[4])

    def forward(self, x):  # InvertedResidual's, with no unpacking of chunk()
        if self.stride == 1:
            halves = x.chunk(2, dim=1)
            out = torch.cat((halves[0], self.branch2(halves[1])), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)

    shufflenetv2.InvertedResidual.forward = forward
    torch.manual_seed(seed)
    m = shufflenetv2.shufflenet_v2_x0_5(weights=None, num_classes=10)
    fx_qat(m, out, "torch_qat_shufflenet_v2_fx", (1, 3, 128, 128), seed)


# --- A YOLOv8-style detector ----------------------------------------------------
#
# Ultralytics' YOLOv8 layout at small widths (16, 32, 64, 128) and 160 x 160
# input: conv-bn-SiLU blocks, C2f (torch.chunk, bottlenecks with and without
# the residual add, Concat), SPPF (three chained 5x5 max pools and a Concat),
# a nearest-upsampling neck with Concats, and three detection scales whose
# box (distribution focal loss: softmax over 8 bins, a fixed 1x1 conv) and
# class (sigmoid) outputs are concatenated.


class ConvBnSiLU(nn.Module):
    def __init__(self, c1, c2, k=1, stride=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, stride, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c, shortcut):
        super().__init__()
        self.cv1 = ConvBnSiLU(c, c, 3)
        self.cv2 = ConvBnSiLU(c, c, 3)
        self.shortcut = shortcut

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.shortcut else y


class C2f(nn.Module):
    def __init__(self, c1, c2, n=1, shortcut=False):
        super().__init__()
        self.c = c2 // 2
        self.cv1 = ConvBnSiLU(c1, 2 * self.c, 1)
        self.cv2 = ConvBnSiLU((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x):
        halves = self.cv1(x).chunk(2, 1)
        y = [halves[0], halves[1]]  # (FX cannot unpack a traced tuple)
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c1, c2, k=5):
        super().__init__()
        self.cv1 = ConvBnSiLU(c1, c1 // 2, 1)
        self.cv2 = ConvBnSiLU(c1 // 2 * 4, c2, 1)
        self.m = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class DFL(nn.Module):
    """Box side distances as the expectation over reg_max bins."""

    def __init__(self, reg_max):
        super().__init__()
        self.conv = nn.Conv2d(reg_max, 1, 1, bias=False).requires_grad_(False)
        self.conv.weight.data[:] = torch.arange(reg_max, dtype=torch.float).view(1, reg_max, 1, 1)
        self.reg_max = reg_max

    def forward(self, x):
        n = x.shape[0]
        bins = x.view(n, 4, self.reg_max, -1).transpose(2, 1).softmax(1)
        return self.conv(bins).view(n, 4, -1)


class YoloV8(nn.Module):
    def __init__(self, nc=4, widths=(16, 32, 64, 128), reg_max=8):
        super().__init__()
        a, b, c, d = widths
        self.b0, self.b1, self.b2 = ConvBnSiLU(3, a, 3, 2), ConvBnSiLU(a, b, 3, 2), C2f(b, b, 1, True)
        self.b3, self.b4 = ConvBnSiLU(b, c, 3, 2), C2f(c, c, 1, True)
        self.b5, self.b6, self.b7 = ConvBnSiLU(c, d, 3, 2), C2f(d, d, 1, True), SPPF(d, d)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.n1, self.n2 = C2f(d + c, c), C2f(c + b, b)
        self.d1, self.n3 = ConvBnSiLU(b, b, 3, 2), C2f(b + c, c)
        self.d2, self.n4 = ConvBnSiLU(c, c, 3, 2), C2f(c + d, d)
        self.nc, self.reg_max = nc, reg_max
        self.no = nc + 4 * reg_max
        c2, c3 = max(16, b // 4, 4 * reg_max), max(b, nc)
        self.box = nn.ModuleList(
            nn.Sequential(ConvBnSiLU(x, c2, 3), ConvBnSiLU(c2, c2, 3), nn.Conv2d(c2, 4 * reg_max, 1))
            for x in (b, c, d))
        self.cls = nn.ModuleList(
            nn.Sequential(ConvBnSiLU(x, c3, 3), ConvBnSiLU(c3, c3, 3), nn.Conv2d(c3, nc, 1))
            for x in (b, c, d))
        self.dfl = DFL(reg_max)

    def forward(self, x):
        p3 = self.b2(self.b1(self.b0(x)))
        p4 = self.b4(self.b3(p3))
        p5 = self.b7(self.b6(self.b5(p4)))
        h4 = self.n1(torch.cat((self.up(p5), p4), 1))
        h3 = self.n2(torch.cat((self.up(h4), p3), 1))
        h4 = self.n3(torch.cat((self.d1(h3), h4), 1))
        h5 = self.n4(torch.cat((self.d2(h4), p5), 1))
        n = x.shape[0]
        heads = [torch.cat((self.box[i](f), self.cls[i](f)), 1).view(n, self.no, -1)
                 for i, f in enumerate((h3, h4, h5))]
        parts = torch.cat(heads, 2).split((4 * self.reg_max, self.nc), 1)
        return torch.cat((self.dfl(parts[0]), parts[1].sigmoid()), 1)


def yolov8_fx(out, seed):
    torch.manual_seed(seed)
    fx_qat(YoloV8(), out, "torch_qat_yolov8", (1, 3, 160, 160), seed)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "torch")
    os.makedirs(out, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    conv_bn_net(out)
    deconv_net(out)
    for seed, (name, build, shape, *act_max) in enumerate(torchvision_nets(), start=10):
        torchvision_net(out, name, build, shape, seed, *act_max)
    efficientnet_b0_fx(out, seed=20)
    yolov8_fx(out, seed=21)
    shufflenet_v2_fx(out, seed=22)


if __name__ == "__main__":
    main()
