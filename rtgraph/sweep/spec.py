"""A sweep file (``sweep.toml``) read and checked before any work starts.

::

    [sweep]
    mode = "grid"                 # grid | random | lhs
    samples = 20                  # random / lhs: how many points
    seed = 0                      # random / lhs draws, and the run's generated data
    numerics = false              # true: real numerics, error against the reference

    [axes]
    model = ["models/mlp.rtg"]    # relative to the sweep file
    device = ["toy", "ascend-910b"]
    streams = ["single", "by-unit"]
    memory = ["greedy", "stream-ordered"]
    # also alloc, opt_level, batch_size, fast_math, precision: any compile option the CLI sets

    [axes.params]                 # program parameters; every model must declare each
    B = [64, 128]

    [[exclude]]                   # a point matching every key of a rule is left out
    device = "toy"
    streams = "single"

Every mistake is a :class:`SweepError` located at its key or value in the TOML text (file,
line, column, a caret and a hint), and all of them are reported together: an unknown key, an
empty axis, an unknown device, model or parameter, and an impossible combination — found by
building each combination's :class:`~rtgraph.compiler.options.CompileOptions` and by loading
each model with each parameter set on each device (a tensor that does not fit is one).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from rtgraph import api
from rtgraph.compiler.options import CompileOptions, OptionError
from rtgraph.device.spec import DeviceSpec
from rtgraph.errors import RtgError, Source, Span, did_you_mean, raise_all

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as a package (a dependency there)
    import tomli as tomllib

#: The option axes (CompileOptions fields the CLI sets), with the type of each value.
OPTION_AXES: dict[str, type] = {
    "streams": str,
    "memory": str,
    "alloc": str,
    "opt_level": int,
    "batch_size": int,
    "fast_math": bool,
    "precision": str,
}
#: Every axis, in the order a point and the table list them.
AXES: tuple[str, ...] = ("model", "device", *OPTION_AXES)
SWEEP_KEYS: dict[str, type] = {"mode": str, "samples": int, "seed": int, "numerics": bool}
MODES = ("grid", "random", "lhs")


class SweepError(RtgError):
    """A sweep file that cannot run: located at the key or value it is about."""


@dataclass(frozen=True)
class Model:
    """A model of the sweep: the path as written, and the program text read once."""

    path: str
    filename: str
    text: str
    #: The device the program names, for points whose file sweeps no device (None until the
    #: model is loaded by the check).
    own_device: DeviceSpec | None = None


@dataclass(frozen=True)
class Sweep:
    """A checked sweep file: its axes as tuples of values, in the order written."""

    path: Path
    text: str
    mode: str
    samples: int | None
    seed: int
    numerics: bool
    axes: dict[str, tuple]  # every name of AXES; device None: the program's own
    params: dict[str, tuple[int, ...]]
    exclude: tuple[dict[str, tuple], ...]
    models: dict[str, Model]
    devices: dict[str | None, DeviceSpec | None]


class Locator:
    """Where a key (or a value under it) is written in a TOML text: the span an error shows."""

    HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\- ]+?)\s*\]\]?")
    KEY = re.compile(r"^\s*(\"?)([A-Za-z0-9_\-]+)\1\s*=")

    def __init__(self, source: Source) -> None:
        self.source = source
        self.lines = source.text.split("\n")
        # (table, key) → line index; a [[table]]'s n-th entry is "table.n".
        self.keys: dict[tuple[str, str], int] = {}
        self.headers: dict[str, int] = {}
        table, seen = "", {}
        for i, line in enumerate(self.lines):
            if header := self.HEADER.match(line):
                table = header[2].replace(" ", "")
                if header[1] == "[[":
                    seen[table] = seen.get(table, -1) + 1
                    table = f"{table}.{seen[table]}"
                self.headers.setdefault(table, i)
            elif key := self.KEY.match(line):
                self.keys.setdefault((table, key[2]), i)

    def span(self, table: str, key: str | None = None, value: object = None) -> Span:
        """The span of ``key`` in ``table`` (its header when ``key`` is None or not found), or
        of ``value`` written under the key."""
        at = self.keys.get((table, key)) if key is not None else None
        if at is None:
            at = self.headers.get(table, 0)
            return self._word(at, self.lines[at].strip() or " ", whole=True)
        if value is not None:
            later = [i for i in (*self.keys.values(), *self.headers.values()) if i > at]
            end = min(later, default=len(self.lines))
            written = _written(value)
            for i in range(at, end):
                found = re.search(rf"(?<![\w\"]){re.escape(written)}(?![\w\"])", self.lines[i])
                if found and (i > at or found.start() > self.lines[i].index("=")):
                    return Span(self.source, i + 1, found.start() + 1, i + 1, found.end() + 1)
        return self._word(at, key or "", whole=False)

    def _word(self, at: int, word: str, whole: bool) -> Span:
        line = self.lines[at] if at < len(self.lines) else ""
        col = line.find(word) if word and not whole else len(line) - len(line.lstrip())
        col = max(col, 0)
        return Span(self.source, at + 1, col + 1, at + 1, col + 1 + max(len(word), 1))


def _written(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def read_sweep(path: str | Path) -> Sweep:
    """Read and check the sweep file at ``path`` (see the module docstring)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SweepError(f"cannot read sweep file {path}: {e.strerror}") from None
    return parse_sweep(text, path)


def parse_sweep(text: str, path: Path) -> Sweep:
    """Check a sweep file's ``text`` (read from ``path``: models resolve beside it)."""
    source = Source(str(path), text)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        line, col = _toml_position(str(e))
        span = Span(source, line, col, line, col + 1)
        raise SweepError(f"not valid TOML: {str(e).split(' (at')[0]}", span) from None
    checker = _Checker(path, source, doc)
    return checker.sweep()


def _toml_position(message: str) -> tuple[int, int]:
    found = re.search(r"line (\d+), column (\d+)", message)
    return (int(found[1]), int(found[2])) if found else (1, 1)


class _Checker:
    """One pass over a parsed sweep file, collecting every located error before raising."""

    def __init__(self, path: Path, source: Source, doc: dict) -> None:
        self.path, self.doc = path, doc
        self.where = Locator(source)
        self.errors: list[RtgError] = []

    def error(self, message: str, span: Span, hint: str | None = None) -> None:
        self.errors.append(SweepError(message, span, hint))

    def sweep(self) -> Sweep:
        doc = self.doc
        self._unknown("", doc, ("sweep", "axes", "exclude"))
        settings = self._table("sweep")
        axes_doc = self._table("axes")
        self._unknown("sweep", settings, tuple(SWEEP_KEYS))
        self._unknown("axes", axes_doc, (*AXES, "params"))
        for key, kind in SWEEP_KEYS.items():
            if key in settings and not _is(settings[key], kind):
                self.error(f"'{key}' must be {kind.__name__}", self.where.span("sweep", key))
        mode = settings.get("mode", "grid")
        if mode not in MODES:
            self.error(
                f"unknown mode '{mode}'",
                self.where.span("sweep", "mode", mode),
                f"choose from: {', '.join(MODES)}",
            )
        samples = settings.get("samples")
        if mode != "grid" and not (isinstance(samples, int) and samples > 0):
            self.error(
                f"mode '{mode}' needs samples = N (at least 1)",
                self.where.span("sweep", "samples" if "samples" in settings else "mode"),
            )
        axes = {name: self._axis("axes", name, axes_doc) for name in AXES}
        if "model" not in axes_doc:
            self.error("no model to sweep", self.where.span("axes"), 'add model = ["m.rtg"]')
        if "device" not in axes_doc:
            axes["device"] = (None,)
        params_doc = axes_doc.get("params", {})
        if not isinstance(params_doc, dict):
            self.error("'params' must be a table", self.where.span("axes", "params"))
            params_doc = {}
        params = {name: self._axis("axes.params", name, params_doc, int) for name in params_doc}
        exclude = self._exclude(params)
        models = self._models(axes["model"])
        devices = self._devices(axes["device"])
        self._option_combinations(axes)
        self._programs(axes, params, models, devices)
        raise_all(self.errors)
        return Sweep(
            path=self.path,
            text=self.where.source.text,
            mode=mode,
            samples=samples,
            seed=settings.get("seed", 0),
            numerics=settings.get("numerics", False),
            axes=axes,
            params=params,
            exclude=exclude,
            models=models,
            devices=devices,
        )

    def _table(self, name: str) -> dict:
        value = self.doc.get(name, {})
        if not isinstance(value, dict):
            self.error(f"'{name}' must be a table", self.where.span("", name), f"write [{name}]")
            return {}
        return value

    def _unknown(self, table: str, doc: dict, allowed: tuple[str, ...]) -> None:
        for key in doc:
            if key not in allowed:
                hint = did_you_mean(key, allowed) or f"known keys: {', '.join(allowed)}"
                self.error(f"unknown key '{key}'", self.where.span(table, key), hint)

    def _axis(self, table: str, name: str, doc: dict, kind: type | None = None) -> tuple:
        """An axis's values (a scalar stands for one), checked for type; defaults when absent."""
        kind = kind or (str if name in ("model", "device") else OPTION_AXES[name])
        if name not in doc:
            default = CompileOptions.__dataclass_fields__.get(name)
            return (default.default,) if default is not None else ()
        values = doc[name] if isinstance(doc[name], list) else [doc[name]]
        if not values:
            self.error(
                f"empty axis '{name}': the sweep would have no points",
                self.where.span(table, name),
                "give at least one value, or remove the key for the default",
            )
        for value in values:
            if not _is(value, kind):
                self.error(
                    f"'{name}' takes {kind.__name__} values, not {value!r}",
                    self.where.span(table, name, value),
                )
        return tuple(dict.fromkeys(values))  # a repeated value is one point, not two

    def _exclude(self, params: dict[str, tuple]) -> tuple[dict[str, tuple], ...]:
        rules = self.doc.get("exclude", [])
        if not isinstance(rules, list):
            self.error("write exclusions as [[exclude]] tables", self.where.span("", "exclude"))
            return ()
        known = (*AXES, *params)
        found = []
        for n, rule in enumerate(rules):
            self._unknown(f"exclude.{n}", rule, known)
            found.append({k: tuple(v) if isinstance(v, list) else (v,) for k, v in rule.items()})
        return tuple(found)

    def _models(self, paths: tuple) -> dict[str, Model]:
        models = {}
        for written in paths:
            if not isinstance(written, str):
                continue
            file = (self.path.parent / written).resolve()
            try:
                text = file.read_text(encoding="utf-8")
            except OSError as e:
                self.error(
                    f"cannot read model '{written}': {e.strerror}",
                    self.where.span("axes", "model", written),
                    f"paths are relative to the sweep file's folder ({self.path.parent})",
                )
                continue
            models[written] = Model(written, str(file), text)
        return models

    def _devices(self, names: tuple) -> dict[str | None, DeviceSpec | None]:
        devices: dict[str | None, DeviceSpec | None] = {}
        for name in names:
            if name is None:
                devices[None] = None
                continue
            given = str(self.path.parent / name) if name.endswith(".toml") else name
            try:
                devices[name] = api.device(given)
            except RtgError as e:
                self.error(
                    f"unknown device '{name}': {e.message}",
                    self.where.span("axes", "device", name),
                    e.hint,
                )
        return devices

    def _option_combinations(self, axes: dict[str, tuple]) -> None:
        """Build every combination's CompileOptions; a refused value is located once."""
        reported = set()
        for combo in itertools.product(*(axes[a] for a in OPTION_AXES)):
            try:
                CompileOptions(**dict(zip(OPTION_AXES, combo, strict=True)))
            except OptionError as e:
                if (e.option, repr(e.value)) in reported:
                    continue
                reported.add((e.option, repr(e.value)))
                self.error(
                    f"{e.option} = {e.value!r}: {e.problem}",
                    self.where.span("axes", e.option, e.value),
                    e.hint,
                )

    def _programs(self, axes, params, models, devices) -> None:
        """Load each model with each parameter set on each device: undeclared parameters and
        tensors that do not fit are errors here, not in the middle of the sweep."""
        names, grids = list(params), list(itertools.product(*params.values()))
        for (written, model), (device, spec) in itertools.product(models.items(), devices.items()):
            for values in grids:
                bound = dict(zip(names, values, strict=True))
                try:
                    program = api.parse(model.text, model.filename, bound, device=spec)
                    own = api.device_for(None, program.device)
                    models[written] = dataclasses.replace(models[written], own_device=own)
                except RtgError as e:
                    self._program_error(written, device, bound, e)
                    break

    def _program_error(self, written: str, device, bound: dict, e: RtgError) -> None:
        undeclared = re.search(r"parameter '(\w+)' is not declared", e.message)
        if undeclared:
            name = undeclared[1]
            self.error(
                f"model '{written}' has no parameter '{name}'",
                self.where.span("axes.params", name),
                f"{e.hint}; sweep that model in a file of its own" if e.hint else None,
            )
            return
        on = f" on device '{device}'" if device else ""
        given = ", ".join(f"{k}={v}" for k, v in bound.items())
        self.error(
            f"impossible combination: model '{written}'{on}"
            + (f" with {given}" if given else "")
            + f": {e.message}",
            self.where.span("axes", "model", written),
            "remove the value, or leave the combination out with an [[exclude]] rule",
        )


def _is(value: object, kind: type) -> bool:
    """``value`` is of ``kind`` (a bool is not an int here)."""
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)
