"""Workloads: the trace schema, loaders, generators and arrival processes."""

from augserve.workload.arrivals import (
    ArrivalConfig,
    arrival_times,
    arrival_times_until,
    gamma_arrivals,
    poisson_arrivals,
)
from augserve.workload.errors import TraceFormatError
from augserve.workload.generators import (
    infercept_like,
    mix_no_call,
    resample,
    toolbench_like,
    without_calls,
)
from augserve.workload.infercept import load_infercept
from augserve.workload.jsonl import read_jsonl, read_jsonl_with_arrivals, write_jsonl
from augserve.workload.registry import load_trace, make_workload
from augserve.workload.stats import trace_stats
from augserve.workload.tokenize import approx_token_count
from augserve.workload.trace import KINDS, Trace, TraceRequest

__all__ = [
    "KINDS",
    "ArrivalConfig",
    "Trace",
    "TraceFormatError",
    "TraceRequest",
    "approx_token_count",
    "arrival_times",
    "arrival_times_until",
    "gamma_arrivals",
    "infercept_like",
    "load_infercept",
    "load_trace",
    "make_workload",
    "mix_no_call",
    "poisson_arrivals",
    "read_jsonl",
    "read_jsonl_with_arrivals",
    "resample",
    "toolbench_like",
    "trace_stats",
    "without_calls",
    "write_jsonl",
]
