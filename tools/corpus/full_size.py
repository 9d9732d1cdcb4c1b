#!/usr/bin/env python3
"""Full-size networks for start-up and memory measurements; not built in CI.

    python3 tools/corpus/full_size.py OUT_DIR [--only bert_base resnet50 resnet18_qat]

Writes into OUT_DIR (bench/peers/peers.py OUT_DIR --startup measures them):
  bert_base_s128_qdq.onnx  BERT-base: 12 layers, hidden 768, 12 heads, FFN 3072,
  bert_base_s128_dyn.onnx  vocabulary 30522, 512 positions (110 M parameters),
                           seeded as BERT initializes its weights, exported by
                           torch at opset 13 (torch_encoders.py's network at
                           full size) and quantized by transformers.py in
                           ONNX Runtime's static QDQ and dynamic forms at
                           sequence length 128, calibrated on two token batches
                           by its numpy interpreter; with <model>.input_ids.npy
                           and <model>.attention_mask.npy;
  bert_base_sym_qdq.onnx   the same two with the batch and sequence symbolic as
  bert_base_sym_dyn.onnx   the export wrote them (one model for every shape);
  resnet50_qdq.onnx        torchvision's ResNet-50 at 1x3x224x224 (seeded
                           weights, BatchNorm statistics from a few batches,
                           folded into the convolutions by torch's export),
                           quantized by ocr_models.py in ONNX Runtime's QDQ form
                           (s8 per-channel weights, u8 activations into every
                           layer, int32 biases), calibrated on two inputs by its
                           numpy interpreter; with <model>.input.npy;
  torch_qat_resnet18.onnx  torchvision's quantizable ResNet-18 at 1x3x224x224
                           through torch's eager-mode QAT (torch_qat.py's
                           recipe: conv-bn-relu fused, fake quantizers
                           calibrated on random batches) and torch's QDQ
                           export; with <model>.input.npy.
Needs Debian's python3-torch and python3-torchvision. It takes a few minutes
and about 3 GB of memory.
"""

import argparse
import os
import sys

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ocr_models  # noqa: E402
import torch_encoders  # noqa: E402
import transformers  # noqa: E402

SEQUENCE = 128


def _save(model, path):
    onnx.checker.check_model(model)
    with open(path, "wb") as fh:
        fh.write(model.SerializeToString())
    print(f"full_size: {path} ({len(model.graph.node)} nodes, "
          f"{os.path.getsize(path) / 2**20:.0f} MiB)")


def _fold_identities(model):
    """torch's export writes a weight used twice as Identity(initializer); the
    quantizers look for initializers, so each such output becomes one."""
    from onnx import numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    keep = []
    for n in g.node:
        if n.op_type == "Identity" and n.input[0] in inits:
            g.initializer.append(numpy_helper.from_array(numpy_helper.to_array(inits[n.input[0]]),
                                                         n.output[0]))
        else:
            keep.append(n)
    del g.node[:]
    g.node.extend(keep)
    return model


def bert_base(out):
    import torch

    te = torch_encoders
    te.VOCAB, te.MAX_LEN, te.HIDDEN, te.HEADS, te.FFN, te.LAYERS = 30522, 512, 768, 12, 3072, 12
    torch.use_deterministic_algorithms(True)
    model = te.Encoder("erf")
    te.init(model, seed=31)
    model.eval()
    f32_path = os.path.join(out, "bert_base_f32.onnx")
    te.export(model, f32_path, 13)
    unbound = _fold_identities(onnx.load(f32_path))
    base = transformers.bind_sequence(unbound, SEQUENCE)
    os.remove(f32_path)
    ranges = transformers.calibrate(base, SEQUENCE, batches=2)
    ids, mask = transformers.token_batch(SEQUENCE, 1, seed=7)
    for form, m in (("qdq", transformers.quantize_static(base, ranges)),
                    ("dyn", transformers.quantize_dynamic(base))):
        stem = os.path.join(out, f"bert_base_s{SEQUENCE}_{form}")
        _save(m, stem + ".onnx")
        np.save(stem + ".input_ids.npy", ids)
        np.save(stem + ".attention_mask.npy", mask)
    # The batch and sequence as the export left them (symbolic), quantized alike.
    for form, m in (("qdq", transformers.quantize_static(unbound, ranges)),
                    ("dyn", transformers.quantize_dynamic(unbound))):
        _save(m, os.path.join(out, f"bert_base_sym_{form}.onnx"))


def resnet50(out):
    import torch
    import torchvision

    torch.manual_seed(50)
    net = torchvision.models.resnet50()
    # BatchNorm statistics from a few batches, so activations keep their scale.
    net.train()
    with torch.no_grad():
        for _ in range(3):
            net(torch.randn(8, 3, 224, 224))
    net.eval()
    shape = (1, 3, 224, 224)
    f32_path = os.path.join(out, "resnet50_f32.onnx")
    torch.onnx.export(net, torch.zeros(shape), f32_path, opset_version=13,
                      input_names=["input"], output_names=["logits"], do_constant_folding=True)
    source = onnx.load(f32_path)
    os.remove(f32_path)
    ranges, shapes = {}, {}
    rng = np.random.default_rng(5)
    x0 = None
    for _ in range(2):
        x = rng.standard_normal(shape).astype(np.float32)
        x0 = x if x0 is None else x0
        for t, v in ocr_models.run(source, x).items():
            shapes[t] = v.shape
            if v.size == 0:
                continue
            lo, hi = float(v.min()), float(v.max())
            r = ranges.get(t, (lo, hi))
            ranges[t] = (min(r[0], lo), max(r[1], hi))
    m = ocr_models.quantize(ocr_models.upgrade(source, shape, shapes), ranges, True)
    m.graph.name = "resnet50_qdq"
    _save(m, os.path.join(out, "resnet50_qdq.onnx"))
    np.save(os.path.join(out, "resnet50_qdq.input.npy"), x0)


def resnet18_qat(out):
    import torch_qat  # noqa: E402 (needs torch)
    from torchvision.models import quantization as qm
    torch_qat.torchvision_net(out, "torch_qat_resnet18",
                              lambda: qm.resnet18(weights=None, quantize=False),
                              (1, 3, 224, 224), seed=18)
    path = os.path.join(out, "torch_qat_resnet18.onnx")
    print(f"full_size: {path} ({os.path.getsize(path) / 2**20:.0f} MiB)")
    x = np.random.default_rng(18).random((1, 3, 224, 224), dtype=np.float32)
    np.save(os.path.join(out, "torch_qat_resnet18.input.npy"), x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name, build in (("bert_base", bert_base), ("resnet50", resnet50),
                        ("resnet18_qat", resnet18_qat)):
        if not args.only or name in args.only:
            build(args.out)


if __name__ == "__main__":
    main()
