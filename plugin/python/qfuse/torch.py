"""from_torch: a PyTorch module (QAT-prepared with fake quantization, or a
float module) exported to ONNX in memory and compiled by qfuse."""

import io

from . import compile as _compile, load


def _names(module, example_inputs, input_names, output_names):
    import torch

    if input_names is None:
        input_names = ["input"] if len(example_inputs) == 1 else \
            [f"input{i}" for i in range(len(example_inputs))]
    if output_names is None:
        with torch.no_grad():
            out = module(*example_inputs)
        count = len(out) if isinstance(out, (tuple, list)) else 1
        output_names = ["output"] if count == 1 else [f"output{i}" for i in range(count)]
    return list(input_names), list(output_names)


def _tuple(example_inputs):
    import torch

    return (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)


def to_onnx(module, example_inputs, *, input_names=None, output_names=None, opset=13,
            dynamic_batch=True):
    """The ONNX bytes torch.onnx.export writes for `module` on `example_inputs`
    (a tensor or a tuple of them). Fake quantization becomes QuantizeLinear /
    DequantizeLinear pairs (opset >= 13 for per-channel weights). With
    dynamic_batch, dimension 0 of every input and output is symbolic
    ("batch"), so that load() / evaluate() can bind any batch size. Inputs
    are named "input" ("input0", "input1", ... for several) unless named."""
    import torch

    example_inputs = _tuple(example_inputs)
    input_names, output_names = _names(module, example_inputs, input_names, output_names)
    axes = {n: {0: "batch"} for n in list(input_names) + list(output_names)} if dynamic_batch else None
    buf = io.BytesIO()
    was_training = module.training
    restore = _exportable_fake_quant(module)
    try:
        module.eval()
        torch.onnx.export(module, example_inputs, buf, opset_version=opset,
                          input_names=list(input_names), output_names=list(output_names),
                          do_constant_folding=True, dynamic_axes=axes)
    finally:
        restore()
        module.train(was_training)
    return buf.getvalue()


def _exportable_fake_quant(module):
    """Readies a QAT module's fake quantizers for export; returns what undoes it.

    Exporting runs the module, so observers are switched off (the calibrated
    scales stay as they are). torch's default QAT qconfig uses
    FusedMovingAvgObsFakeQuantize, whose fused operator torch.onnx cannot
    export: with its observer off it computes what FakeQuantize.forward
    does, so that forward (fake_quantize_per_tensor/channel_affine, which
    export as QuantizeLinear / DequantizeLinear) stands in while exporting."""
    try:
        import torch.ao.quantization as tq
    except ImportError:
        return lambda: None
    undo = []
    for m in module.modules():
        if not isinstance(m, tq.FakeQuantizeBase) or not hasattr(m, "observer_enabled"):
            continue
        saved = m.observer_enabled.clone()
        m.observer_enabled.fill_(0)
        undo.append(lambda m=m, saved=saved: m.observer_enabled.copy_(saved))
        fused = getattr(tq, "FusedMovingAvgObsFakeQuantize", None)
        if fused is not None and isinstance(m, fused):
            m.forward = tq.FakeQuantize.forward.__get__(m)
            undo.append(lambda m=m: m.__dict__.pop("forward", None))

    def restore():
        for u in reversed(undo):
            u()
    return restore


def from_torch(module, example_inputs, *, input_names=None, output_names=None, opset=13,
               dynamic_batch=True, **compile_options):
    """Exports `module` in memory (to_onnx) and compiles it for the shapes of
    `example_inputs` with the options of qfuse.compile (fuse, threads,
    integer_only, ...). The result's .model is the imported Model (its ONNX
    bytes in .model.onnx), which evaluate() and Comparison accept too."""
    example_inputs = _tuple(example_inputs)
    input_names, output_names = _names(module, example_inputs, input_names, output_names)
    data = to_onnx(module, example_inputs, input_names=input_names, output_names=output_names,
                   opset=opset, dynamic_batch=dynamic_batch)
    model = load(data, shapes={n: tuple(t.shape) for n, t in zip(input_names, example_inputs)})
    return _compile(model, **compile_options)
