"""The peers benchmark's tf.data service arm, run by a Python with tensorflow-cpu and pyarrow (--tf-python): a
dispatcher and two workers as processes of their own, and this process as the consumer.

`python tfdata.py CONFIG` starts them, then answers a line on stdin with one `PEERS {json}` line on stdout: "run"
reads the training files once through the service. The workers read Parquet with pyarrow in a tf.py_function (core
TensorFlow has no Parquet reader): the service ships the pipeline's graph to the workers, whose py_function looks its
Python function up by the token it was registered under, so every worker builds the same pipeline first (the same
token) before it starts serving. The consumer turns each batch into numpy arrays of the trainer's dtypes and shapes
(rows.numpy_tensors; torch is not in this venv). Needs only tensorflow, pyarrow and numpy: no primus, no torch.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tensorflow as tf
from rows import ROW_ID, RowSet, numpy_tensors  # this folder is on the path: the script runs from it

WORKERS = 2
PREFIX = "PEERS "
service = tf.data.experimental.service


def _schema(config: dict[str, Any]) -> pa.Schema:
    floats = [config["label"], *config["dense"]]
    return pa.schema([pa.field(name, pa.float32() if name in floats else pa.int64()) for name in config["names"]])


def pipeline(config: dict[str, Any]) -> tf.data.Dataset:
    """(file, row group) units, each read and cast by pyarrow in a py_function, rebatched to the benchmark's batch rows."""
    schema = _schema(config)
    names: list[str] = config["names"]
    kinds = [tf.float32 if field.type == pa.float32() else tf.int64 for field in schema]
    units = [(path, group) for path in config["files"] for group in range(pq.ParquetFile(path).metadata.num_row_groups)]

    def read(path: tf.Tensor, group: tf.Tensor) -> list[np.ndarray]:
        table = pq.ParquetFile(path.numpy().decode()).read_row_group(int(group), columns=names).cast(schema)
        return [column.to_numpy() for column in table.columns]

    def unit(path: tf.Tensor, group: tf.Tensor) -> dict[str, tf.Tensor]:
        columns = tf.py_function(read, [path, group], kinds)
        for column in columns:
            column.set_shape([None])
        return dict(zip(names, columns, strict=True))

    paths, groups = zip(*units, strict=True)
    return tf.data.Dataset.from_tensor_slices((list(paths), list(groups))).map(unit).rebatch(config["rows_per_batch"])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def consume(dataset: tf.data.Dataset, dispatcher: str, config: dict[str, Any]) -> dict[str, Any]:
    sparse = [(name, int(buckets)) for name, buckets in config["sparse"]]
    row_column = [name for name, _ in sparse].index(ROW_ID)
    started, rows = time.perf_counter(), RowSet()
    for element in dataset.apply(service.distribute("distributed_epoch", dispatcher)):
        tensors = numpy_tensors({name: value.numpy() for name, value in element.items()}, config["label"], config["dense"], sparse)
        rows = rows.plus(RowSet.of(tensors.sparse[:, row_column]))
    return {"rows": rows.count, "seconds": time.perf_counter() - started, "row_set": rows.to_json()}


def reply(message: dict[str, Any]) -> None:
    print(PREFIX + json.dumps(message), flush=True)


def main(argv: list[str]) -> int:
    with open(argv[1]) as config_file:
        config = json.load(config_file)
    if len(argv) > 2 and argv[2] == "dispatcher":
        service.DispatchServer(service.DispatcherConfig(port=int(argv[3]))).join()
        return 0
    dataset = pipeline(config)  # first, in every process: its py_function's token is the same in all of them
    if len(argv) > 2 and argv[2] == "worker":
        service.WorkerServer(service.WorkerConfig(dispatcher_address=argv[3])).join()
        return 0
    port = _free_port()
    me = [sys.executable, __file__, argv[1]]
    children = [subprocess.Popen([*me, "dispatcher", str(port)])]
    children += [subprocess.Popen([*me, "worker", f"localhost:{port}"]) for _ in range(WORKERS)]
    try:
        reply({"ready": True, "tensorflow": tf.__version__})
        for line in sys.stdin:
            if line.strip() == "run":
                reply(consume(dataset, f"grpc://localhost:{port}", config))
    finally:
        for child in children:
            child.kill()
            child.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
