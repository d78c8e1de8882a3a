"""Every choice the compiler takes, in one frozen object built once by the CLI or the API.

:class:`CompileOptions` is validated when it is built: a name outside an option's vocabulary
is an :class:`OptionError` (a :class:`~rtgraph.errors.UsageError`, exit status 2) naming the
option and, where one is close, the value meant. Each vocabulary is declared once, next to
what it names — the stream policies in :mod:`rtgraph.compiler.scheduling.policies`, the memory
plans in :mod:`rtgraph.compiler.passes.memory_plans` (beside the pass that implements them),
the allocation modes in :mod:`rtgraph.compiler.passes.alloc_modes` — and this module only
gathers them: the CLI's help and ``docs/options.md`` (:func:`options_markdown`) are generated
from :data:`OPTIONS`.

Every pass is ``name(graph, options)``; :func:`rtgraph.compiler.pipeline.compile_program` hands
them the options bound to the device compiled for (:meth:`CompileOptions.for_device`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from rtgraph.compiler.optimizer.levels import (
    DEFAULT_LEVEL,
    LEVELS,
    PASSES,
    level_problem,
    passes_problem,
)
from rtgraph.compiler.optimizer.precision_vocabulary import (
    BUDGET_HELP,
    MAX_CALIBRATION_BATCHES,
    PRECISIONS,
    SCALE_METHODS,
    budget_problem,
    name_problem,
)
from rtgraph.compiler.passes.alloc_modes import ALLOC_HELP, alloc_problem
from rtgraph.compiler.passes.memory_plans import PLANS, plan_problem
from rtgraph.compiler.scheduling.policies import (
    POLICIES,
    REFINE_REPLAYS,
    REFINE_SEED,
    REFINE_WORK,
    StreamPolicy,
    policy_from_name,
    policy_problem,
)
from rtgraph.device.spec import DeviceSpec
from rtgraph.errors import UsageError

#: How much of a rejected value a message repeats (a megabyte-long --streams is not echoed).
SHOWN_VALUE_CHARS = 40


def shown(value: object) -> object:
    """``value`` as a message repeats it: a long string cut to :data:`SHOWN_VALUE_CHARS`."""
    if isinstance(value, str) and len(value) > SHOWN_VALUE_CHARS:
        return value[:SHOWN_VALUE_CHARS] + "…"
    return value


class OptionError(UsageError):
    """A compile option with a value it does not take; ``option`` names the field."""

    def __init__(self, option: str, value: object, problem: str, hint: str | None = None):
        super().__init__(f"{option}={shown(value)!r}: {problem}", hint=hint)
        self.option = option
        self.value = value
        self.problem = problem


@dataclass(frozen=True)
class CompileOptions:
    """The compiler's options; see :data:`OPTIONS` (and ``docs/options.md``) for each one.

    ``device`` is not an option a user sets: :meth:`for_device` fills it in for the passes,
    with ``batch_size`` applied to the device's host.
    """

    streams: str | StreamPolicy = "auto"
    memory: str = "stream-ordered"
    alloc: str = "static"
    batch_size: int | None = None
    order_seed: int = REFINE_SEED
    order_budget: int = REFINE_REPLAYS
    opt_level: int = DEFAULT_LEVEL
    passes: tuple[str, ...] | None = None
    fast_math: bool = False
    precision: str = "keep"
    error_budget: str = "cosine=0.999"
    calibration: str | None = None
    calibration_batches: int = 4
    calibration_method: str = "entropy"
    check: bool = False
    device: DeviceSpec | None = field(default=None, repr=False)
    #: The weights the precision pass calibrates with when the program carries its own (an
    #: imported ONNX model's; :func:`rtgraph.compiler.pipeline.compile_program` sets it).
    #: Not compared: options are compared and printed, arrays are neither.
    calibration_params: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.streams, str):
            _check("streams", self.streams, policy_problem(self.streams))
        elif not isinstance(self.streams, StreamPolicy):
            _check("streams", self.streams, ("not a policy name nor a StreamPolicy", None))
        _check("memory", self.memory, plan_problem(self.memory))
        _check("alloc", self.alloc, alloc_problem(self.alloc))
        if self.batch_size is not None and self.batch_size < 1:
            _check("batch_size", self.batch_size, ("must be at least 1", None))
        if self.order_budget < 0:
            _check("order_budget", self.order_budget, ("must be at least 0", None))
        _check("opt_level", self.opt_level, level_problem(self.opt_level))
        if self.passes is not None:
            _check("passes", self.passes, passes_problem(self.passes))
        _check("precision", self.precision, name_problem(self.precision, PRECISIONS))
        _check("error_budget", self.error_budget, budget_problem(self.error_budget))
        _check(
            "calibration_method",
            self.calibration_method,
            name_problem(self.calibration_method, SCALE_METHODS),
        )
        runs = self.passes if self.passes is not None else LEVELS[self.opt_level]
        if self.precision != "keep" and "choose_precision" not in runs:
            _check(
                "precision",
                self.precision,
                (
                    "needs the choose_precision pass, which these options leave out",
                    "use -O1 or -O2",
                ),
            )
        if not 1 <= self.calibration_batches <= MAX_CALIBRATION_BATCHES:
            _check(
                "calibration_batches",
                self.calibration_batches,
                (f"must be 1 to {MAX_CALIBRATION_BATCHES}", None),
            )

    def for_device(self, device: DeviceSpec) -> CompileOptions:
        """These options bound to ``device``, whose host takes ``batch_size`` when it is set."""
        if self.batch_size is not None:
            device = replace(device, host=replace(device.host, batch_size=self.batch_size))
        return replace(self, device=device)

    @property
    def target(self) -> DeviceSpec:
        """The device bound by :meth:`for_device` (a pass needs one)."""
        if self.device is None:
            raise UsageError(
                "these compile options name no device",
                hint="bind one with options.for_device(spec), as compile_program does",
            )
        return self.device

    def stream_policy(self) -> StreamPolicy:
        """The policy ``streams`` names (built in, with the order-search settings), or itself."""
        if isinstance(self.streams, str):
            return policy_from_name(
                self.streams, order_seed=self.order_seed, order_budget=self.order_budget
            )
        return self.streams


def _check(option: str, value: object, problem: tuple[str, str | None] | None) -> None:
    if problem is not None:
        raise OptionError(option, value, *problem)


@dataclass(frozen=True)
class Option:
    """One option as the CLI and the docs show it."""

    name: str  # the CompileOptions field
    flag: str | None  # the CLI flag, if the CLI sets it
    summary: str
    values: Mapping[str, str] = field(default_factory=dict)  # vocabulary: value → what it does
    default_means: str = ""  # what the default stands for, where it is not one of the values
    #: How the CLI reads the flag: one ``name`` of the values, an ``int``, a comma-separated
    #: list of ``names``, or a ``switch`` that takes no value.
    kind: Literal["name", "int", "names", "switch", "text"] = "name"

    @property
    def default(self) -> object:
        return CompileOptions.__dataclass_fields__[self.name].default


#: The options in the order the docs list them.
OPTIONS: tuple[Option, ...] = (
    Option(
        "streams",
        "--streams",
        "which stream each task goes to, and the submission order",
        POLICIES,
    ),
    Option(
        "memory",
        "--memory",
        "the static memory plan: where reuse of device bytes is allowed",
        PLANS,
    ),
    Option(
        "alloc",
        "--alloc",
        "where tensors get device memory: the static plan, or an allocator at run time",
        ALLOC_HELP,
    ),
    Option(
        "batch_size",
        "--batch-size",
        "the host's submission batch (commands per ioctl)",
        default_means="the device spec's host.batch_size",
        kind="int",
    ),
    Option(
        "opt_level",
        "-O",
        "how much the graph optimizer does before lowering",
        {
            str(level): ", ".join(names) or "nothing: the graph as written"
            for level, names in LEVELS.items()
        },
        kind="int",
    ),
    Option(
        "passes",
        "--passes",
        "exactly these optimizer passes, in this order, instead of a level's",
        PASSES,
        default_means="the level's passes",
        kind="names",
    ),
    Option(
        "fast_math",
        "--fast-math",
        "fused kernels keep floating intermediates in f32 instead of rounding each step as the "
        "unfused ops would; the run reports the error against the reference",
        kind="switch",
    ),
    Option(
        "precision",
        "--precision",
        "the dtypes the program computes in (outputs keep their declared dtypes)",
        PRECISIONS,
    ),
    Option(
        "error_budget",
        "--error-budget",
        "how far --precision auto may take the outputs from the program's f32 form: " + BUDGET_HELP,
        kind="text",
    ),
    Option(
        "calibration",
        "--calibration",
        "an .npz of input batches (leading axis: batch) for int8 and auto to calibrate on",
        default_means=f"seeded batches ({'--calibration-batches'})",
        kind="text",
    ),
    Option(
        "calibration_batches",
        "--calibration-batches",
        "how many seeded input batches int8 and auto calibrate on, when no --calibration",
        kind="int",
    ),
    Option(
        "calibration_method",
        "--calibration-method",
        "how an activation's int8 scale is chosen from its calibration values",
        SCALE_METHODS,
    ),
    Option("order_seed", None, "the seed of the list scheduler's order search"),
    Option(
        "order_budget",
        None,
        "replays of the device's timing the list scheduler's order "
        f"search may spend (at most {REFINE_WORK:,} ÷ tasks)",
    ),
    Option("check", None, "check the task graph's invariants after every pass (tests turn it on)"),
)


def options_markdown() -> str:
    """``docs/options.md``: every option, its values with what each does, its default."""
    lines = [
        "# Compile options",
        "",
        "<!-- generated by tools/make_options_doc.py from rtgraph/compiler/options.py; "
        "do not edit -->",
        "",
        "One frozen `CompileOptions` (`rtgraph/compiler/options.py`) carries every choice the",
        "compiler takes, and every pass receives it. The command line builds it from its flags;",
        "`rtgraph.compile(program, streams=…, memory=…, alloc=…, batch_size=…)` from its",
        "keywords, or takes one as `options=`. A value outside an option's list is a usage error",
        "(exit status 2) naming the option, with a hint. From Python, `streams` also takes your",
        "own policy: any object with a `name` and an `assign(graph)` method",
        "(`rtgraph.compiler.scheduling.policies.StreamPolicy`).",
        "",
    ]
    for option in OPTIONS:
        flag = f"`{option.flag}`" if option.flag else "Python only"
        summary = option.summary[0].upper() + option.summary[1:]
        default = f"`{option.default}`"
        if option.default_means:
            default += f" ({option.default_means})"
        lines += [f"## `{option.name}` ({flag})", "", f"{summary}. Default: {default}.", ""]
        if option.values:
            lines += ["| value | what it does |", "| --- | --- |"]
            lines += [f"| `{value}` | {what} |" for value, what in option.values.items()]
            lines.append("")
    return "\n".join(lines)
