"""qfuse's evaluation on a Dask cluster (Debian: python3-distributed).

    from dask.distributed import Client
    client = Client("tcp://scheduler:8786")          # or Client(LocalCluster(...))
    result = qfuse.distributed.evaluate(client, "model_qdq.onnx", partitions)
    print(result.line()); result.records.to_dataframe()

Each partition is an iterable of (inputs, labels) batches, or a function
returning one, which then loads its data on the worker (better for a large
data set: only the function travels). The model's bytes go to every worker
once; each worker process compiles the model once (per batch shape) and
evaluates the partitions it is given; the results merge in partition order,
so the numbers equal qfuse.evaluate_partitions(model, partitions) in one
process. Workers need qfuse importable (installed, or on PYTHONPATH).
qfuse schedules nothing itself: placement, retries and scaling are Dask's.
"""

from .evaluate import Evaluation, _onnx_of, evaluate_partition, model_key


def evaluate(client, model, partitions, *, input_name=None, predict=None, compare=True,
             **compile_options):
    """qfuse.evaluate_partitions on the cluster behind `client` (a
    distributed.Client): one task per partition. compile_options as
    qfuse.compile's; threads defaults to 1 (one per worker thread)."""
    onnx, import_options = _onnx_of(model)
    options = dict(compile_options)
    options.setdefault("threads", 1)
    key = model_key(onnx, import_options, options, input_name, compare)
    [shared] = client.scatter([onnx], broadcast=True, hash=False)
    futures = [client.submit(evaluate_partition, key, shared, import_options, options, input_name,
                             predict, compare, p, pure=False)
               for p in partitions]
    total = Evaluation()
    for part in client.gather(futures):
        total = total.merge(Evaluation.from_dict(part))
    return total
