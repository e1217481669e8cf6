"""Shared helpers for the cost-model tests: locate the real traces and pull ops out of them."""

from __future__ import annotations

import gzip
from functools import lru_cache

import orjson
from conftest import SHARED_TRACES as TRACES
from conftest import shared_trace as need

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
BERT = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
RESNET = "tracelens/mi300/resnet_act_checkpoint.json.gz"
NORMS = "tracelens/perf_model/normalization/normalization_layer_test.json.gz"
B200 = "tracelens/b200/eager_trace.json.gz"
A100_TRAIN = "hta/negative_queue_length_values_check/rank0.json.gz"
NCCL = "hta/nccl_parser_config/nccl_data.json.gz"


@lru_cache(maxsize=8)
def events(rel: str) -> tuple:
    with gzip.open(need(rel)) as fh:
        data = orjson.loads(fh.read())
    return tuple(data["traceEvents"] if isinstance(data, dict) else data)


def linked_kernels(rel: str) -> list[tuple[dict, dict]]:
    """(kernel or memcpy/memset event, its innermost cpu_op) pairs linked by External id."""
    ops = {}
    kernels = []
    for e in events(rel):
        cat = e.get("cat")
        args = e.get("args") or {}
        if cat == "cpu_op" and "External id" in args:
            prev = ops.get(args["External id"])
            if prev is None or e.get("dur", 0) < prev.get("dur", 0):
                ops[args["External id"]] = e
        elif str(cat).lower() in ("kernel", "gpu_memcpy", "gpu_memset"):
            kernels.append(e)
    return [(k, ops[k["args"]["External id"]]) for k in kernels
            if (k.get("args") or {}).get("External id") in ops]


def first_op(rel: str, name: str, dims=None) -> dict:
    for e in events(rel):
        if e.get("cat") == "cpu_op" and e.get("name") == name:
            if dims is None or e["args"].get("Input Dims") == dims:
                return e
    raise AssertionError(f"{name} with dims {dims} not in {rel}")


def op_args(e: dict) -> tuple:
    a = e["args"]
    return e["name"], a.get("Input Dims"), a.get("Input type"), a.get("Concrete Inputs"), a.get("Input Strides")
