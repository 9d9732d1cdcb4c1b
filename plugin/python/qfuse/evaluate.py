"""Fused against unfused accuracy over a data set.

evaluate(model, data) runs every batch of a DataLoader-style iterable of
(inputs, labels) through the fused and the unfused model: top-1 accuracy of
each, how often they agree, and the per-layer comparison table over the same
batches. A data set in partitions (evaluate_partitions, or
qfuse.distributed.evaluate on a Dask cluster) is evaluated partition by
partition and merged in partition order, so both give the same numbers.
"""

import hashlib
import os

import numpy as np

from . import Comparison, _qfuse, load
from ._records import Records


def _onnx_of(model):
    """(ONNX bytes, import options) of a path, bytes, Model or CompiledModel."""
    from . import CompiledModel, Model

    if isinstance(model, CompiledModel):
        model = model.model
    if isinstance(model, Model):
        if not hasattr(model, "onnx"):
            raise TypeError("evaluate needs a model loaded from ONNX (qfuse.load / from_torch)")
        return model.onnx, dict(model.onnx_options)
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model), {}
    path = os.fspath(model)
    with open(path, "rb") as f:
        return f.read(), {"external_data_dir": os.path.dirname(os.path.abspath(path))}


def _array(x):
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().numpy()
    return np.ascontiguousarray(x)


def top1(outputs):
    """The class of each row: argmax over axis 1 of the first output."""
    return np.argmax(outputs.reshape(outputs.shape[0], -1), axis=1)


class Evaluation:
    """Counts over the images evaluated, and the merged comparison records."""

    def __init__(self, images=0, fused_correct=0, unfused_correct=0, agree=0, records=None):
        self.images = images
        self.fused_correct = fused_correct
        self.unfused_correct = unfused_correct
        self.agree = agree
        self.records = records if records is not None else Records()

    @property
    def fused_accuracy(self):
        return 100.0 * self.fused_correct / self.images if self.images else 0.0

    @property
    def unfused_accuracy(self):
        return 100.0 * self.unfused_correct / self.images if self.images else 0.0

    @property
    def agreement(self):
        return 100.0 * self.agree / self.images if self.images else 0.0

    def line(self):
        """The accuracy line `qfuse run` prints for a classifier."""
        return (f"accuracy: unfused {self.unfused_accuracy:.2f}%, fused {self.fused_accuracy:.2f}%, "
                f"agreement {self.agreement:.2f}%")

    def merge(self, other):
        """This evaluation and one over other data, as one."""
        records = other.records if not self.records else \
            Records(_qfuse.merge_records(list(self.records), list(other.records)),
                    layers=self.records.layers or other.records.layers)
        return Evaluation(self.images + other.images, self.fused_correct + other.fused_correct,
                          self.unfused_correct + other.unfused_correct, self.agree + other.agree,
                          records)

    def as_dict(self):
        return {"images": self.images, "fused_correct": self.fused_correct,
                "unfused_correct": self.unfused_correct, "agree": self.agree,
                "records": list(self.records), "layers": self.records.layers}

    @staticmethod
    def from_dict(d):
        return Evaluation(d["images"], d["fused_correct"], d["unfused_correct"], d["agree"],
                          Records(d["records"], layers=d["layers"]))

    def __repr__(self):
        return f"Evaluation({self.images} images; {self.line()})"


class Evaluator:
    """One model compiled once per batch shape (a Comparison: fused and
    unfused), evaluating partitions of (inputs, labels) batches."""

    def __init__(self, onnx, import_options, compile_options, input_name=None, predict=None,
                 compare=True):
        self.onnx = onnx
        self.import_options = import_options
        self.compile_options = compile_options
        self.input_name = input_name
        self.predict = predict or top1
        self.compare = compare
        self._by_shape = {}

    def _comparison(self, shape):
        c = self._by_shape.get(shape)
        if c is None:
            name = self.input_name or self._single_input()
            model = load(self.onnx, shapes={name: shape}, **self.import_options)
            c = Comparison(model, **self.compile_options)
            self._by_shape[shape] = c
        return c

    def _single_input(self):
        import onnx

        g = onnx.load_from_string(self.onnx).graph
        inits = {i.name for i in g.initializer}
        names = [i.name for i in g.input if i.name not in inits]
        if len(names) != 1:
            raise ValueError(f"the model has {len(names)} inputs ({', '.join(names)}): "
                             "name the one the data feeds with input_name=")
        self.input_name = names[0]
        return names[0]

    def evaluate(self, batches):
        """An Evaluation of one partition: an iterable of (inputs, labels)."""
        images = fused_ok = unfused_ok = agree = 0
        for c in self._by_shape.values():
            c.clear()
        for x, y in batches:
            x = _array(x)
            if x.dtype == np.float64:
                x = x.astype(np.float32)
            labels = _array(y).reshape(-1)
            c = self._comparison(tuple(x.shape))
            name = self.input_name
            fused = c.fused.run({name: x})
            unfused = c.unfused.run({name: x})
            first = c.fused.outputs[0]["name"]
            pf, pu = self.predict(fused[first]), self.predict(unfused[first])
            images += len(labels)
            fused_ok += int(np.sum(pf == labels))
            unfused_ok += int(np.sum(pu == labels))
            agree += int(np.sum(pf == pu))
            if self.compare:
                c.run({name: x})
        records = Records()
        for c in self._by_shape.values():
            if c.runs == 0:
                continue
            r = c.records()
            records = r if not records else \
                Records(_qfuse.merge_records(list(records), list(r)), layers=records.layers)
        return Evaluation(images, fused_ok, unfused_ok, agree, records)


def model_key(onnx, import_options, compile_options, input_name, compare):
    """What identifies an Evaluator: the model's bytes and every option."""
    h = hashlib.sha256(onnx)
    h.update(repr((sorted(import_options.items()), sorted(compile_options.items()), input_name,
                   compare)).encode())
    return h.hexdigest()


_EVALUATORS = {}


def evaluate_partition(key, onnx, import_options, compile_options, input_name, predict, compare,
                       partition):
    """One partition on this process's Evaluator for `key` (made on first
    use: each process compiles once). `partition` is an iterable of
    (inputs, labels) batches, or a function returning one (to load the data
    where it runs). Returns Evaluation.as_dict() (plain data, for Dask)."""
    ev = _EVALUATORS.get(key)
    if ev is None:
        ev = Evaluator(onnx, import_options, compile_options, input_name, predict, compare)
        _EVALUATORS[key] = ev
    batches = partition() if callable(partition) else partition
    return ev.evaluate(batches).as_dict()


def evaluate(model, data, *, input_name=None, predict=None, compare=True, **compile_options):
    """Runs `data`, an iterable of (inputs, labels) batches (a torch DataLoader,
    or numpy arrays), through `model` fused and unfused.

    model: a path, ONNX bytes, a Model from qfuse.load or a CompiledModel from
    from_torch; its first input dimension is bound to each batch's. predict
    maps the first output to class ids (default: argmax over axis 1).
    compare: also the per-layer comparison over every batch (three more
    inferences per batch). compile_options: as qfuse.compile's (fuse aside).
    Returns an Evaluation: fused_accuracy, unfused_accuracy, agreement (%),
    records (per-layer, Records), line()."""
    return evaluate_partitions(model, [data], input_name=input_name, predict=predict,
                               compare=compare, **compile_options)


def evaluate_partitions(model, partitions, *, input_name=None, predict=None, compare=True,
                        **compile_options):
    """evaluate() over a data set in partitions (each an iterable of batches,
    or a function returning one), merged in partition order: what
    qfuse.distributed.evaluate computes on a cluster, in this process."""
    onnx, import_options = _onnx_of(model)
    options = dict(compile_options)
    key = model_key(onnx, import_options, options, input_name, compare)
    total = Evaluation()
    for p in partitions:
        part = evaluate_partition(key, onnx, import_options, options, input_name, predict, compare, p)
        total = total.merge(Evaluation.from_dict(part))
    return total
