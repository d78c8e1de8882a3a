"""Serving: a request-level simulator over the compiler and emulator (``rtgraph serve``).

Requests arrive (``arrivals``), a batching policy groups them (``policies``), each batch's step
costs come from compiling and emulating the model at that shape once (``steps``), decoder
requests hold paged KV-cache blocks (``kvcache``), a discrete-event loop serves them
(``simulate``), and ``metrics`` and ``capacity`` say what a user would see: queue delay, TTFT,
TBT, end-to-end latency, throughput and goodput, and the largest rate an SLO allows.
docs/serving.md is the user's guide.
"""

from rtgraph.serving.arrivals import (
    Lengths,
    Requests,
    generate_requests,
    parse_arrivals,
    read_trace,
)
from rtgraph.serving.capacity import CapacityResult, search_capacity
from rtgraph.serving.metrics import parse_slo, summarize
from rtgraph.serving.policies import Policy, parse_policy
from rtgraph.serving.requests import ServingError, parse_duration
from rtgraph.serving.simulate import Outcome, Workload, simulate
from rtgraph.serving.steps import StepTable

__all__ = [
    "CapacityResult",
    "Lengths",
    "Outcome",
    "Policy",
    "Requests",
    "ServingError",
    "StepTable",
    "Workload",
    "generate_requests",
    "parse_arrivals",
    "parse_duration",
    "parse_policy",
    "parse_slo",
    "read_trace",
    "search_capacity",
    "simulate",
    "summarize",
]
