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
    try:
        module.eval()
        torch.onnx.export(module, example_inputs, buf, opset_version=opset,
                          input_names=list(input_names), output_names=list(output_names),
                          do_constant_folding=True, dynamic_axes=axes)
    finally:
        module.train(was_training)
    return buf.getvalue()


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
