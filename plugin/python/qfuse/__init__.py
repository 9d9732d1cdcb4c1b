"""qfuse: int8 CPU inference of quantized ONNX models on oneDNN, from Python.

    import numpy as np, qfuse
    model = qfuse.load("resnet_qdq.onnx", shapes={"input": (1, 3, 224, 224)})
    model = qfuse.load("yolov8n_int8.xml")           # an OpenVINO IR (weights in the .bin)
    compiled = qfuse.compile(model)                  # fused: every layer one int8 primitive
    y = compiled.run({"input": x})["output"]         # numpy in, numpy out
    table = qfuse.compare(model, {"input": x})       # fused against unfused, per layer
    table.to_dataframe().head()

Inputs are read in place when they are C-contiguous arrays of the input's
dtype and shape (anything else raises InferenceError naming the input);
inference releases the GIL, so threads run requests in parallel
(CompiledModel.run takes a free request from a pool; create_request() gives a
thread its own). Errors are qfuse.Error subclasses carrying the library's
messages.

from_torch() exports a PyTorch QAT module in memory; evaluate() runs a
DataLoader-style iterable through fused and unfused; qfuse.distributed runs
that evaluation on a Dask cluster.
"""

import os

import numpy as _np

from . import _qfuse
from ._qfuse import (CompiledModel, CompileError, Error, GraphError, InferenceError, IoError,
                     Model, Request, UnsupportedError)
from ._records import Records

__version__ = _qfuse.__version__

__all__ = [
    "load", "compile", "compare", "Comparison", "Model", "CompiledModel", "Request", "Records",
    "Error", "GraphError", "UnsupportedError", "CompileError", "InferenceError", "IoError",
    "from_torch", "evaluate", "evaluate_partitions", "Evaluation", "random_inputs",
]


def load(source, shapes=None, *, external_data_dir=""):
    """Imports an ONNX model from a path or from bytes, or an OpenVINO IR from
    the path of its .xml (its weights read from the .bin beside it).

    shapes: concrete shapes for inputs with symbolic dimensions, by input name
    ({"input": (8, 3, 224, 224)}).
    An ONNX model keeps its bytes (Model.onnx) so that evaluate() can bind
    other batch sizes.
    """
    bound = {str(k): [int(d) for d in v] for k, v in (shapes or {}).items()}
    if not isinstance(source, (bytes, bytearray, memoryview)) and \
            os.fspath(source).endswith(".xml"):
        return _qfuse.import_openvino(os.fspath(source), bound)
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    else:
        path = os.fspath(source)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise IoError(f"read {path}: {e.strerror}") from None
        if not external_data_dir:
            external_data_dir = os.path.dirname(os.path.abspath(path))
    model = _qfuse.import_onnx(data, bound, external_data_dir)
    model.onnx = data
    model.onnx_options = {"external_data_dir": external_data_dir}
    return model


def _as_model(model):
    if isinstance(model, Model):
        return model
    if isinstance(model, CompiledModel):
        if model.model is None:
            raise TypeError("this CompiledModel has no source Model (it comes from a Comparison)")
        return model.model
    return load(model)


def compile(model, *, fuse=True, threads=0, integer_only=False, allow_residual_round_drop=False,
            integer_eta=2.0 ** -20, log_level="", cache_dir="", shapes=None, max_shapes=8):
    """Compiles a Model (or a path / ONNX bytes) with the C++ API's options.

    fuse=False runs every node alone in f32 by its definition (the reference);
    threads: OpenMP threads an inference may use (0: all); integer_only: each
    fused layer requantizes in integer arithmetic; log_level: "trace" ..
    "off" (process-wide). shapes: for a path, concrete shapes of symbolic
    input dimensions, as load() takes them.

    cache_dir (default: the QFUSE_CACHE_DIR environment variable): the
    compiled-model cache, for a model given as a path (.onnx or OpenVINO
    .xml). The first compile stores the model as its passes left it; later
    ones with the same file bytes and options map it without importing the
    file again (compile_times()["cache"] says "hit ..." or "miss, ...").
    A model compiled through the cache has no source Model (.model is None).

    max_shapes: how many other input shapes (symbolic dimensions at other
    sizes) the model keeps compiled; the one run longest ago goes first.
    """
    cache = cache_dir or os.environ.get("QFUSE_CACHE_DIR", "")
    is_path = isinstance(model, (str, os.PathLike))
    if cache and is_path:
        bound = {str(k): [int(d) for d in v] for k, v in (shapes or {}).items()}
        return _qfuse.compile_file(os.fspath(model), bound, fuse, allow_residual_round_drop,
                                   int(threads), integer_only, float(integer_eta), log_level,
                                   os.fspath(cache_dir) if cache_dir else "", int(max_shapes))
    if cache_dir:
        import warnings
        warnings.warn("qfuse.compile: cache_dir is used for a model given as a file path; "
                      "this model is compiled without the cache", stacklevel=2)
    source = load(model, shapes) if is_path else _as_model(model)
    compiled = _qfuse.compile(source, fuse, allow_residual_round_drop, int(threads), integer_only,
                              float(integer_eta), log_level, int(max_shapes))
    compiled._source = source  # the Python Model, with its ONNX bytes
    return compiled


def random_inputs(infos, seed=0):
    """Deterministic inputs for a model's `inputs` list: float32 uniform in
    [0, 1), 8-bit integers over their range, 32/64-bit integers 0."""
    rng = _np.random.default_rng(seed)
    out = {}
    for info in infos:
        dt, shape = _np.dtype(info["dtype"]), tuple(info["shape"])
        if dt == _np.float32:
            out[info["name"]] = rng.random(shape, dtype=_np.float32)
        elif dt in (_np.uint8, _np.int8):
            lo, hi = (0, 256) if dt == _np.uint8 else (-128, 128)
            out[info["name"]] = rng.integers(lo, hi, size=shape, dtype=dt)
        else:
            out[info["name"]] = _np.zeros(shape, dtype=dt)
    return out


def _layers(self):
    """One record per executed node, in execution order: node, op, precision
    ("int8", "f32", "quantize", "dequantize"), implementation (oneDNN's, or
    qfuse's), post_ops (text) and post_op_list, macs, reorders, types, the
    fixed-point form of the output scales."""
    return Records(_qfuse.CompiledModel._layer_list(self))


def _refusals(self):
    """Why the fusion passes left candidates alone: pass, node, reason."""
    return Records(_qfuse.CompiledModel._refusal_list(self))


def _dump(self):
    """The compiled graph as data: {"layers", "refusals", "fusion_log",
    "memory", "compile_times"}; str(dump["layers"]) prints it."""
    return {"layers": self.layers(), "refusals": self.refusals(), "fusion_log": list(self.fusion_log),
            "memory": self.memory(), "compile_times": self.compile_times()}


def _bench(self, inputs=None, *, seconds=1.0, requests=1, threads_per_request=None, per_layer=False,
           min_inferences=1):
    """Latency and throughput as `qfuse bench` measures them: `requests`
    parallel requests (threads) for `seconds` after one warm-up inference
    each. Returns a dict of figures (latency_ms_median, p90, p99, min, max,
    throughput_per_s, ...) and, with per_layer, "layers": each node's median
    time in microseconds, slowest first (Records). inputs: by name (default:
    random_inputs)."""
    if inputs is None:
        inputs = random_inputs(self.inputs)
    if threads_per_request is None:
        threads = self.options["threads"] or os.cpu_count() or 1
        threads_per_request = max(1, threads // max(1, requests))
    result = _qfuse.CompiledModel._bench(self, inputs, float(seconds), int(requests),
                                         int(threads_per_request), bool(per_layer), int(min_inferences))
    result["layers"] = Records(result["layers"])
    return result


def _profile(self, inputs=None, runs=20):
    """Each node's median time over `runs` inferences (microseconds, slowest
    first), its share, GOPS and implementation: the per-layer profile."""
    if inputs is None:
        inputs = random_inputs(self.inputs)
    return Records(_qfuse.CompiledModel._profile(self, inputs, int(runs)))


CompiledModel.model = property(
    lambda self: self.__dict__.get("_source") or self._model,
    doc="the Model it was compiled from (None for a Comparison's fused / unfused)")
CompiledModel.layers = _layers
CompiledModel.refusals = _refusals
CompiledModel.bench = _bench
CompiledModel.profile = _profile
CompiledModel.dump = _dump


class Comparison:
    """Fused against unfused, tensor by tensor (qfuse::Comparison).

    Compiles `model` twice (fused with the options given, and unfused); each
    run(inputs) runs both on the same inputs and adds each compared tensor's
    differences: propagated (fused end to end) and isolated (each fused layer
    fed the unfused path's values: its own error). records() gives them in
    execution order with the implementation and post-ops of the node that
    writes each; write_html() writes `qfuse compare`'s report.
    """

    def __init__(self, model, *, threads=0, integer_only=False, allow_residual_round_drop=False,
                 integer_eta=2.0 ** -20, log_level=""):
        self._c = _qfuse.Comparison(_as_model(model), allow_residual_round_drop, int(threads),
                                    integer_only, float(integer_eta), log_level)
        self.runs = 0

    @property
    def fused(self):
        return self._c.fused()

    @property
    def unfused(self):
        return self._c.unfused()

    def run(self, inputs):
        self._c.run(inputs)
        self.runs += 1

    def run_against(self, inputs, reference):
        """The fused graph against tensors computed elsewhere (ONNX Runtime's,
        by the model file's tensor names); returns how many were used."""
        self.runs += 1
        return self._c.run_against(inputs, reference)

    def records(self):
        return Records(self._c.records(), layers=self._c.fused_layers())

    def clear(self):
        """Forgets the differences so far; the compiled models stay."""
        self._c.clear()
        self.runs = 0


def compare(model, inputs, *, html=None, title="model", **options):
    """Fused against unfused on one input set (a dict) or several (a list of
    dicts): the per-tensor records (Records; .to_dataframe()). html: also
    write `qfuse compare`'s HTML report there."""
    c = Comparison(model, **options)
    sets = [inputs] if isinstance(inputs, dict) else list(inputs)
    for s in sets:
        c.run(s)
    records = c.records()
    if html is not None:
        records.write_html(html, title=title, inputs=f"{len(sets)} input set(s) given in Python")
    return records


def merge(a, b):
    """Comparison records of runs over different data merged into one table."""
    return Records(_qfuse.merge_records(list(a), list(b)), layers=getattr(a, "layers", None))


from .evaluate import Evaluation, evaluate, evaluate_partitions  # noqa: E402
from .torch import from_torch  # noqa: E402
