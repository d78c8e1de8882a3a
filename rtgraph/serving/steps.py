"""Step costs: each (phase, batch, sequence length, context) step compiled and emulated once.

A serving system runs a few step shapes over and over, so rtgraph compiles the model at each
shape the simulation asks for through the public API (``rtgraph.api``: load, compile, run
without numerics — the timeline is the same) and keeps the makespan and memory peak. Shapes are
bucketed as serving systems bucket them (batch and lengths rounded up to a power of two), so a
10-minute trace needs a few dozen emulations, not one per step. ``--profile steps.json`` saves
the table and reuses it; a table made for another model, parameters or device is refused.

Phases: ``denoise`` (the image model's step: ``N`` = 2 samples per request, the classifier-free
guidance pair, times the batch), ``prefill`` (B prompts of S tokens, no cache) and ``decode``
(B sequences of one new token over T cached ones) — the latter two on ``llm_prefill.rtg`` —
and ``chunk`` (a prefill chunk: S prompt tokens over T already cached, chunked prefill's piece).

A chunked-prefill iteration mixes d sequences' decode tokens with a prefill chunk of S tokens;
the model's batch is uniform (every sequence the same S and T), so it cannot express that step
in one program. Its cost (:meth:`StepTable.mixed_s`) is the decode step at (d, T) plus the
chunk step at (1, S, T') less the smallest step's makespan: both steps stream every weight from
HBM and launch every kernel once — the floor the smallest step is made of — and a fused step
does that once; what each adds above it (the decode's attention over its caches, the chunk's
matmul rows and attention) is added. It lies between the larger of the two steps and their sum.
The makespan includes the host's submission of the step's commands (the emulator's host lane).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from rtgraph import api
from rtgraph.device.spec import MemorySpec
from rtgraph.files import write_atomic
from rtgraph.ir.graph import Program
from rtgraph.serving.requests import ServingError, located

VERSION = 1
#: Samples per image request in the image model's batch (a conditional and an unconditional
#: pass for classifier-free guidance, as unet_block's default N = 2 is).
SAMPLES_PER_REQUEST = 2
#: The shortest sequence-length bucket.
MIN_TOKENS = 16
IMAGE_PROGRAMS = ("unet_block",)
DECODER_PROGRAMS = ("llm_prefill", "llm_decode")


def bucket(n: int, least: int = 1) -> int:
    """The power of two at or above ``n`` (and at or above ``least``)."""
    n = max(int(n), least)
    return 1 << (n - 1).bit_length()


@dataclass
class StepTable:
    """Step latencies (µs) and memory peaks (bytes), emulated on first use and kept."""

    model: str
    kind: str  # "image" or "decoder"
    defines: dict[str, int]
    device: str | None
    entries: dict[str, tuple[float, int]] = field(default_factory=dict)
    emulated: int = 0

    @classmethod
    def for_model(
        cls, path: str, defines: dict[str, int] | None = None, device: str | None = None
    ) -> StepTable:
        """The table for a model file: an image model (unet_block) or a decoder (llm_prefill,
        or llm_decode whose llm_prefill.rtg counterpart lies beside it)."""
        defines = dict(defines or {})
        program = api.load(path, defines, device=device)
        if program.name in IMAGE_PROGRAMS:
            return cls(os.fspath(path), "image", defines, device)
        if program.name in DECODER_PROGRAMS:
            prefill = Path(path)
            if program.name == "llm_decode":
                prefill = prefill.with_name("llm_prefill.rtg")
                if not prefill.exists():
                    raise ServingError(
                        f"{path}: the decoder's prefill counterpart {prefill} is missing",
                        hint="serve models/llm_prefill.rtg, which has both phases",
                    )
            return cls(os.fspath(prefill), "decoder", defines, device)
        raise ServingError(
            f"{path}: rtgraph serve knows no workload for program {program.name!r}",
            hint="an image model (unet_block.rtg) or a decoder (llm_prefill.rtg, llm_decode.rtg)",
        )

    def _shape(self, phase: str, batch: int, seq: int, ctx: int) -> dict[str, int]:
        if phase == "denoise":
            return {"N": SAMPLES_PER_REQUEST * batch}
        if phase == "prefill":
            return {"B": batch, "S": seq, "T": 0}
        if phase == "chunk":
            return {"B": batch, "S": seq, "T": ctx}
        return {"B": batch, "S": 1, "T": ctx}

    def step(self, phase: str, batch: int, seq: int = 0, ctx: int = 0) -> tuple[float, int]:
        """(latency µs, memory peak bytes) of one step at the bucketed shape."""
        batch = bucket(batch)
        seq = bucket(seq, MIN_TOKENS) if phase in ("prefill", "chunk") else 1
        ctx = bucket(ctx, MIN_TOKENS) if phase == "decode" or (phase == "chunk" and ctx) else 0
        key = f"{phase}/{batch}/{seq}/{ctx}"
        found = self.entries.get(key)
        if found is None:
            found = self.entries[key] = self._emulate(self._shape(phase, batch, seq, ctx))
        return found

    def latency_s(self, phase: str, batch: int, seq: int = 0, ctx: int = 0) -> float:
        return self.step(phase, batch, seq, ctx)[0] * 1e-6

    def mixed_s(self, decoders: int, ctx: int, chunk: int, chunk_ctx: int) -> float:
        """Seconds of a chunked-prefill iteration: ``decoders`` sequences decode one token over
        at most ``ctx`` cached ones while a prefill chunk of ``chunk`` tokens (several prompts'
        chunks counted as one) attends over at most ``chunk_ctx`` (see the module docs)."""
        piece = self.latency_s("chunk", 1, chunk, chunk_ctx)
        if decoders == 0:
            return piece
        floor = self.latency_s("chunk", 1, MIN_TOKENS, 0)
        return self.latency_s("decode", decoders, 0, ctx) + max(piece - floor, 0.0)

    def _emulate(self, shape: dict[str, int]) -> tuple[float, int]:
        program: Program = api.load(self.model, {**self.defines, **shape}, device=self.device)
        compiled = api.compile(program, device=self.device)
        result = api.run(compiled, device=self.device, numerics=False)
        self.emulated += 1
        return float(result.makespan_us), int(result.memory_peak_bytes)

    def param(self, name: str) -> int:
        """A model parameter's value (the file's default unless -D set it)."""
        return int(api.load(self.model, self.defines, device=self.device).params[name])

    def host_link(self) -> tuple[float, float]:
        """The host link's bandwidth (bytes/s) and latency (s): where swapped KV blocks go."""
        named = api.load(self.model, self.defines, device=self.device).device
        host = api.device_for(self.device, named).host
        return float(host.link_bandwidth), float(host.link_latency_us) * 1e-6

    def memory_spec(self) -> MemorySpec:
        """The device's memory: the --device given, else the one the model names."""
        named = api.load(self.model, self.defines, device=self.device).device
        return api.device_for(self.device, named).memory

    def capacity_bytes(self) -> int:
        """Device memory: the --device given, else the one the model names."""
        named = api.load(self.model, self.defines, device=self.device).device
        return int(api.device_for(self.device, named).memory.capacity)

    # --- the profile file -------------------------------------------------------------------

    def identity(self) -> dict:
        return {
            "model": Path(self.model).name,
            "kind": self.kind,
            "defines": dict(sorted(self.defines.items())),
            "device": self.device or api.DEFAULT_DEVICE,
        }

    def to_json(self) -> str:
        steps = {
            k: {"latency_us": v[0], "peak_bytes": v[1]} for k, v in sorted(self.entries.items())
        }
        doc = {"version": VERSION, **self.identity(), "steps": steps}
        return json.dumps(doc, indent=1, sort_keys=True) + "\n"

    def save(self, path: str) -> None:
        write_atomic(path, self.to_json())

    def load(self, path: str) -> None:
        """Take the steps of a saved profile (missing file: nothing to take)."""
        if not Path(path).exists():
            return
        text = Path(path).read_text(encoding="utf-8")
        try:
            doc = json.loads(text)
            steps = doc["steps"]
            ident = {k: doc[k] for k in self.identity()}
            entries = {
                str(k): (float(v["latency_us"]), int(v["peak_bytes"])) for k, v in steps.items()
            }
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ServingError(
                f"{path}: not a step profile ({type(e).__name__}: {e})",
                located(path, text),
                hint="a file written by rtgraph serve --profile; delete it to start afresh",
            ) from None
        if doc.get("version") != VERSION or ident != self.identity():
            raise ServingError(
                f"{path}: profiled for {ident}, not for {self.identity()}",
                located(path, text),
                hint="use another --profile file for this model, parameters and device",
            )
        self.entries.update(entries)
