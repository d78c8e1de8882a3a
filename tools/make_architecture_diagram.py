"""Draw ``docs/architecture.png`` from the layers contract in ``pyproject.toml``.

The picture is the import-linter contract ``[tool.importlinter]`` drawn as it reads: one row per
layer, highest first, a box per package or module (siblings side by side may not import each
other); a module imports only from rows below its own. A band at the top follows one program
through the stages. The same layers are written as text into ``docs/architecture.md`` (between
``<!-- layers:begin -->`` and ``<!-- layers:end -->``) and into the PNG's metadata (key
``rtgraph-layers``), so ``tests/test_docs.py`` can tell when the picture or the page no longer
matches the contract.

Run from the repository root::

    python tools/make_architecture_diagram.py           # rewrite the picture and the doc's list
    python tools/make_architecture_diagram.py --check   # exit 1 if either is stale
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from PIL import Image

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as a package
    import tomli as tomllib

sys.path.insert(0, str(Path(__file__).resolve().parent))

from doc_sections import ROOT, replace_between

from rtgraph.files import write_atomic

PYPROJECT = ROOT / "pyproject.toml"
DOC = ROOT / "docs" / "architecture.md"
PICTURE = ROOT / "docs" / "architecture.png"
BEGIN = "<!-- layers:begin -->"
END = "<!-- layers:end -->"
METADATA_KEY = "rtgraph-layers"

#: What each package holds, in a few words under its box (a package missing here gets none).
CAPTIONS = {
    "cli": "the rtgraph command",
    "bench": "runtime claims, measured",
    "serving": "requests, batching, P99 under load",
    "api": "one call per stage",
    "runtime": "torch.npu-like API",
    "reports": "text, pictures, traces, advice",
    "frontend": ".rtg text → checked IR",
    "compiler": "task DAG, passes, streams, memory",
    "emulator": "runs a stream program",
    "alloc": "run-time allocators",
    "timing": "cost model, event loop",
    "device": "device specs (TOML)",
    "stream_program": "compiler ↔ emulator contract",
    "ir": "Program, printer, interpreter",
    "ops": "op registry",
    "dtypes": "element types",
    "files": "atomic writes",
    "errors": "errors and their renderer",
}
#: The path of one program, top band, left to right: (package, what it hands on).
PIPELINE = (
    ("frontend", "Program"),
    ("compiler", "StreamProgram"),
    ("emulator", "RunResult"),
    ("reports", ""),
)
#: Siblings are drawn left to right in pipeline order (the contract does not order them).
ORDER = ("frontend", "compiler", "emulator", "api", "runtime", "reports", "alloc", "timing")
STAGE_COLOR, SUPPORT_COLOR, DRIVER_COLOR = "#D6E6F5", "#ECECEC", "#FBE3C8"
DRIVERS = ("cli", "bench", "serving", "api", "runtime")
STAGES = (*(name for name, _ in PIPELINE), "ir", "stream_program")
LEGEND = (
    (STAGE_COLOR, "the pipeline"),
    (DRIVER_COLOR, "entry point"),
    (SUPPORT_COLOR, "shared support"),
)


def contract_layers(pyproject: Path = PYPROJECT) -> list[list[str]]:
    """The layers contract of ``pyproject``: the dotted module names of each layer, top first."""
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c.get("type") == "layers"]
    return [[name.strip() for name in layer.split("|")] for layer in layers]


def layers_text(layers: list[list[str]]) -> str:
    """The layers as the doc lists them: one line per layer, siblings joined by ``|``."""
    return "".join(" | ".join(layer) + "\n" for layer in layers)


def _short(module: str) -> str:
    return module.removeprefix("rtgraph.")


def _label(module: str) -> str:
    """``compiler/`` for a package, ``cli.py`` for a module, as a reader finds them."""
    path = ROOT / Path(*module.split("."))
    if path.is_dir():
        return f"{_short(module)}/"
    return f"{_short(module)}.py"


def _color(name: str) -> str:
    if name in STAGES:
        return STAGE_COLOR
    return DRIVER_COLOR if name in DRIVERS else SUPPORT_COLOR


def _ordered(layer: list[str]) -> list[str]:
    rank = {name: k for k, name in enumerate(ORDER)}
    return sorted(layer, key=lambda m: (rank.get(_short(m), len(ORDER)), layer.index(m)))


def draw(layers: list[list[str]]) -> Figure:
    """The picture: the pipeline band on top, then one row of boxes per layer."""
    row_h, band_h, width = 0.62, 1.2, 10.0
    height = band_h + row_h * len(layers) + 0.35
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")

    top = height - 0.15
    ax.text(0.25, top - 0.2, "one program through the stages", fontsize=9, style="italic")
    for k, (color, meaning) in enumerate(LEGEND):
        x = 5.6 + k * 1.45
        ax.add_patch(
            FancyBboxPatch(
                (x, top - 0.27),
                0.18,
                0.14,
                boxstyle="square,pad=0",
                facecolor=color,
                edgecolor="#555555",
                linewidth=0.6,
            )
        )
        ax.text(x + 0.25, top - 0.2, meaning, fontsize=7.5, va="center")
    y = top - 0.7
    ax.text(1.1, y, ".rtg", fontsize=10, family="monospace", va="center", ha="right")
    previous, box_w = 1.2, 1.3
    for k, (name, product) in enumerate(PIPELINE):
        x0 = 1.75 + k * 2.25
        _box(ax, x0, y - 0.2, box_w, 0.4, f"{name}/", STAGE_COLOR)
        ax.add_patch(
            FancyArrowPatch((previous, y), (x0 - 0.02, y), arrowstyle="-|>", mutation_scale=12)
        )
        if product:
            ax.text(x0 + box_w + 0.47, y + 0.12, product, fontsize=7.5, ha="center", style="italic")
        previous = x0 + box_w + 0.02

    left, right = 1.6, width - 0.2
    base = top - band_h
    ax.text(0.25, base - 0.05, "may import ↓", fontsize=8, style="italic", va="top")
    ax.add_patch(
        FancyArrowPatch(
            (0.7, base - 0.3), (0.7, 0.3), arrowstyle="-|>", mutation_scale=14, color="#777777"
        )
    )
    for k, layer in enumerate(layers):
        y0 = base - (k + 1) * row_h + 0.08
        members = _ordered(layer)
        gap = 0.15
        w = (right - left - gap * (len(members) - 1)) / len(members)
        for j, module in enumerate(members):
            x0 = left + j * (w + gap)
            name = _short(module)
            _box(ax, x0, y0, w, row_h - 0.16, _label(module), _color(name), CAPTIONS.get(name))
    return fig


def _box(
    ax: Axes,
    x0: float,
    y0: float,
    w: float,
    h: float,
    title: str,
    color: str,
    caption: str | None = None,
) -> None:
    """A rounded box with a bold monospace title and, below it, an optional caption."""
    ax.add_patch(
        FancyBboxPatch(
            (x0, y0),
            w,
            h,
            boxstyle="round,pad=0,rounding_size=0.06",
            facecolor=color,
            edgecolor="#555555",
            linewidth=0.8,
        )
    )
    cx, cy = x0 + w / 2, y0 + h / 2
    if caption:
        ax.text(
            cx,
            cy + 0.07,
            title,
            ha="center",
            va="center",
            fontsize=9.5,
            weight="bold",
            family="monospace",
        )
        ax.text(cx, cy - 0.12, caption, ha="center", va="center", fontsize=7.5, color="#333333")
    else:
        ax.text(
            cx, cy, title, ha="center", va="center", fontsize=9.5, weight="bold", family="monospace"
        )


def png_bytes(layers: list[list[str]]) -> bytes:
    """The picture as PNG bytes, the layers in its metadata, no software version or date."""
    out = io.BytesIO()
    metadata = {"Software": None, METADATA_KEY: json.dumps(layers)}
    draw(layers).savefig(out, format="png", dpi=110, metadata=metadata)
    return out.getvalue()


def picture_layers(path: Path = PICTURE) -> list[list[str]] | None:
    """The layers a picture was drawn from (its metadata), or None if it has none."""
    with Image.open(path) as image:
        text = getattr(image, "text", {}).get(METADATA_KEY)
    return json.loads(text) if text else None


def with_layers(text: str, layers: list[list[str]]) -> str:
    """``text`` with the block between the markers replaced by the layers, as a ``text`` fence."""
    return replace_between(text, BEGIN, END, f"\n```text\n{layers_text(layers)}```\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if picture or doc is stale")
    args = parser.parse_args(argv)
    layers = contract_layers()
    doc = DOC.read_text(encoding="utf-8")
    if args.check:
        stale = [
            p.name
            for p, ok in (
                (DOC, with_layers(doc, layers) == doc),
                (PICTURE, PICTURE.exists() and picture_layers() == layers),
            )
            if not ok
        ]
        if stale:
            print(f"stale: {', '.join(stale)}; run python tools/make_architecture_diagram.py")
            return 1
        return 0
    write_atomic(PICTURE, png_bytes(layers))
    write_atomic(DOC, with_layers(doc, layers))
    for path in (PICTURE, DOC):
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
