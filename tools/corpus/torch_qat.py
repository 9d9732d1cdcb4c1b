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
ResNet of torchvision's BasicBlocks) need python3-torchvision too.
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


# EfficientNet has no quantizable variant in torchvision: FX graph mode puts
# the fake quantizers in (SiLU, the sigmoid gate and its multiply included),
# with the same qconfig, as a user does for an arbitrary module. Sigmoid keeps
# FX's fixed grid (scale 1/256, zero point 0), which FX requires.
def efficientnet_b0_fx(out, seed):
    from torch.ao.quantization import quantize_fx
    from torchvision.models import efficientnet as en
    torch.manual_seed(seed)
    setting, last = en._efficientnet_conf("efficientnet_b0", width_mult=0.5, depth_mult=0.5)
    m = en.EfficientNet(setting, 0.2, stochastic_depth_prob=0.0, last_channel=last,
                        num_classes=10)  # stochastic depth off: FX traces in training mode
    shape = (1, 3, 128, 128)
    g = torch.Generator().manual_seed(seed)
    batch = (8,) + shape[1:]
    with torch.no_grad():
        m.train()
        for _ in range(8):
            m(torch.rand(batch, generator=g) * 2 - 1)
    m.eval()
    mapping = tq.QConfigMapping().set_global(qat_qconfig())
    from torch.ao.quantization.qconfig_mapping import _FIXED_QPARAMS_OP_TO_OBSERVER
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
    export(m, shape, os.path.join(out, "torch_qat_efficientnet_b0.onnx"))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "torch")
    os.makedirs(out, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    conv_bn_net(out)
    deconv_net(out)
    for seed, (name, build, shape, *act_max) in enumerate(torchvision_nets(), start=10):
        torchvision_net(out, name, build, shape, seed, *act_max)
    efficientnet_b0_fx(out, seed=20)


if __name__ == "__main__":
    main()
