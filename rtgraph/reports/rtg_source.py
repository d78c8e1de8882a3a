"""``rtgraph compile --emit rtg``: a compiled program printed back as ``.rtg`` source.

The compiler's decisions — the optimizer's fused kernels, the streams, every event it
inserted, the host copies — become explicit source: a ``stream`` per compiled stream, the
program's own events under their names and one event array ``ev`` for the compiler's, and each
task as a statement inside ``on <stream> { }`` with its records and waits (``record ev[k]`` /
``wait ev[k]``), the host copies as ``to_device`` / ``to_host`` (a copy of an input's rows as
``to_device(x, rows = [a, b])``, of a part of an output as ``to_host(part)`` with the output's
``concat`` as its ``output`` statement), a fused task as a ``fused { }`` block.

The statements come in *program order* — the tasks by id, each stream's commands in their
sequence, records and waits where the barrier pass put them — not in the final submission
order: recompiled with ``--streams explicit``, program order is what the memory planner
measures lifetimes in and what ``order_submissions`` batches from, so printing it lets the
compiler rebuild the same submission order. Each compiler record gets an event of its own
(``ev[k]``, the k-th record), its waits that event, as the compiler numbers its events before
it recolours them; the program's own events keep their names and their order. Recompiled,
it is the same program on every stream — the same tasks in the same order, every wait paired
with the same record — with the same memory plan and the same numbers; and, when the original
batching submitted the waits on each record in program order (every model in ``models/``
under ``by-unit`` at -O0 and -O2: tests/test_emit_rtg.py), the same submission order and
timeline. What may differ, and why:

* event ids: the recompiled program's events are all its own, so they are not recoloured;
* scalar constants: a number in ``.rtg`` is a constant tensor of its own at each use, and the
  language cannot name one constant shared by several ops as the optimizer shares them, so
  the recompiled program holds a small resident region per use (the activation pool is laid
  out the same, a few aligned slots later);
* the batching, where one record has waits on several streams (an input copy read by the
  Cube and the Vector stream; ``by-unit:N``): the original batching may submit those waits
  in either order, but it keeps all the records and waits of a program's own event in
  program order, so the recompiled program may be batched differently;
* under ``list``, which submits tasks out of program order, the source lists them in an
  order that keeps every wait after its record (lowest task id first), and the recompiled
  program is numbered and planned in that order: equivalent, not the same.

It reads the stream program for the order and the IR it came from (after the optimizer) for
what each task computes: attributes, views (layout ops that made no task) and constants.

A program with params made at load time (the precision pass's converted or quantized weights,
``Tensor.derive``) is refused, with the param and its rule named: ``.rtg`` has no declaration
for a weight converted once when the program is loaded, and writing the conversion as ops
(``cast`` of a declared f32 source, say) would make a different program — a task on every call
instead of none, the source resident as well as the param, another memory plan — which breaks
the promise above that the source recompiles to the same program.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from rtgraph.errors import UsageError
from rtgraph.frontend.values import format_number
from rtgraph.ir.graph import OpNode, Program, Tensor
from rtgraph.ir.weights import describe
from rtgraph.ops import lookup
from rtgraph.stream_program.program import (
    Alloc,
    Barrier,
    Callback,
    Command,
    Free,
    Launch,
    Record,
    StreamProgram,
    Sync,
    Wait,
)

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ELEMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\[([0-9]+)\]\Z")
#: Words a generated name must not be: the language's keywords and built-in names.
_RESERVED = frozenset(
    [
        "device",
        "fn",
        "program",
        "input",
        "param",
        "const",
        "buffer",
        "at",
        "output",
        "stream",
        "event",
        "on",
        "record",
        "wait",
        "barrier",
        "sync",
        "callback",
        "after",
        "blocking",
        "for",
        "in",
        "return",
        "fused",
        "graph",
        "replay",
        "dyn",
        "to_device",
        "to_host",
        "min",
        "max",
        "sqrt",
        "exp",
        "log",
        "rsqrt",
        "true",
        "false",
    ]
)
#: Symbolic attribute kinds (written as bare words).
_SYMBOLIC = ("dtype", "enum", "unit")
INDENT = "    "


def emit_rtg(program: Program, compiled: StreamProgram) -> str:
    """The source of ``compiled``; ``program`` is the IR it was compiled from (optimized)."""
    return _Printer(program, compiled).source()


class _Printer:
    def __init__(self, program: Program, compiled: StreamProgram) -> None:
        self.program = program
        self.compiled = compiled
        self.names: dict[str, str] = {}  # IR name (tensor, stream) → source name
        self.taken: set[str] = set()
        self.producer = {n.output: n for n in program.nodes if isinstance(n, OpNode)}
        self.kernels = [n for n in program.nodes if isinstance(n, OpNode) and n.op == "kernel"]
        self.defined: set[str] = set()
        self.lines: list[str] = []
        self.last_output: dict[int, str] = {}  # stream → the tensor its last task made
        self.on_device: dict[str, str] = {}  # host input → the name its to_device bound
        made = {t.output.tensor for t in compiled.tasks if t.output is not None}
        #: Outputs copied to the host part by part: the concatenation that makes one is its
        #: ``output`` statement (no ``to_host`` copies it whole).
        self.copied_in_parts = {
            t.host for t in compiled.tasks if t.op == "d2h" and "rows" in t.attrs
        }
        #: Concatenations whose parts were computed in place (lowering made them no task).
        self.joins = [
            n
            for n in program.nodes
            if isinstance(n, OpNode) and n.op == "concat" and n.output not in made
        ]

    # --- names -----------------------------------------------------------------------------
    def name(self, ir_name: str, key: str | None = None) -> str:
        """The source name of ``ir_name`` (kept when it is a plain free identifier)."""
        key = key or ir_name
        if key in self.names:
            return self.names[key]
        base = ir_name if _IDENT.match(ir_name) else re.sub(r"\W+", "_", ir_name).strip("_")
        if not base or base[0].isdigit():
            base = f"t_{base}"
        if base in _RESERVED or lookup(base) is not None:
            base = f"{base}_"
        candidate, k = base, 2
        while candidate in self.taken:
            candidate, k = f"{base}_{k}", k + 1
        self.taken.add(candidate)
        self.names[key] = candidate
        return candidate

    def ref(self, ir_name: str) -> str:
        """How the source refers to tensor ``ir_name``: a name, an array element, a number."""
        t = self.program.tensors[ir_name]
        if t.kind == "const":
            return _number(t.value)
        if ir_name in self.on_device:
            return self.on_device[ir_name]
        m = _ELEMENT.match(ir_name)
        if m and t.kind == "param":
            return f"{self.name(m.group(1), 'array:' + m.group(1))}[{m.group(2)}]"
        return self.name(ir_name)

    # --- the file --------------------------------------------------------------------------
    def source(self) -> str:
        if any(isinstance(c, Alloc | Free) for c in self.compiled.commands):
            raise UsageError(
                "--emit rtg prints a statically planned program",
                hint="drop --alloc (run-time allocation has no source form)",
            )
        derived = [t for t in self.program.params_() if t.derive is not None]
        if derived:
            t = derived[0]
            raise UsageError(
                f"--emit rtg cannot print param '{t.name}' : {t.type}: it is made when the "
                f"program is loaded, = {describe(t.derive)}, and .rtg has no declaration for "
                "a weight converted at load time (as ops it would run on every call)",
                hint="emit the program compiled with its own dtypes (--precision keep)",
            )
        own = int(self.compiled.meta.get("user_events", 0))
        self.user_events = self.program.events[:own]
        self.order = program_order(self.compiled, own)
        p = self.program
        head = [f"# {p.name} as compiled: {len(self.compiled.tasks)} tasks in program order"]
        head.append(f'device "{self.compiled.device}"')
        head.append("")
        head.append(f"program {p.name}() {{")
        self.lines = head
        self.declarations()
        self.commands()
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"

    def declarations(self) -> None:
        arrays: dict[str, list[Tensor]] = {}
        for t in self.program.tensors.values():
            m = _ELEMENT.match(t.name)
            if t.kind == "param" and m:
                arrays.setdefault(m.group(1), []).append(t)
        # In the IR's order, an array where its first element is: the memory plan lays the
        # resident tensors out in declaration order.
        for t in self.program.tensors.values():
            m = _ELEMENT.match(t.name)
            if t.kind == "param" and m:
                elements = arrays.pop(m.group(1), None)
                if elements:
                    name = self.name(m.group(1), "array:" + m.group(1))
                    self.declare("param", f"{name}[{len(elements)}]", elements[0])
                self.defined.add(t.name)
            elif t.kind in ("input", "param"):
                self.declare(t.kind, self.name(t.name), t)
            elif t.kind == "buffer":
                at = f" at {t.address:#x}" if t.address is not None else ""
                self.say(f"buffer {self.name(t.name)} : bytes[{t.type.nbytes}]{at}")
        streams = []
        for s in self.compiled.streams:
            name = self.name(s.name, f"stream:{s.id}")
            streams.append(f"{name}(priority = {s.priority})" if s.priority else name)
        self.say(f"stream {', '.join(streams)}")
        self.event_declarations()

    def event_declarations(self) -> None:
        """The program's own events under their names (arrays as arrays), then ``ev[R]``: one
        event per compiler record."""
        own: dict[str, int] = {}  # name or array base → its length (0: a single event)
        for name in self.user_events:
            m = _ELEMENT.match(name)
            if m:
                own[m.group(1)] = max(own.get(m.group(1), 0), int(m.group(2)) + 1)
            else:
                own[name] = 0
        items = [
            f"{self.name(base, 'event:' + base)}[{n}]" if n else self.name(base, "event:" + base)
            for base, n in own.items()
        ]
        records = sum(
            1 for c in self.order if type(c) is Record and c.event >= len(self.user_events)
        )
        if records:
            self.events = self.name("ev", "events")
            items.append(f"{self.events}[{records}]")
        if items:
            self.say(f"event {', '.join(items)}")

    def event(self, event: int) -> str:
        """How the source names event ``event`` of :attr:`order`."""
        own = len(self.user_events)
        if event >= own:
            return f"{self.events}[{event - own}]"
        name = self.user_events[event]
        m = _ELEMENT.match(name)
        if m:
            return f"{self.names['event:' + m.group(1)]}[{m.group(2)}]"
        return self.names["event:" + name]

    def declare(self, kind: str, name: str, t: Tensor) -> None:
        dims = ", ".join(str(d) for d in t.type.shape)
        hint = ""
        if kind == "input" and not t.pinned:
            hint = " @pageable"
        elif kind == "param":
            hint = f" @{t.alloc}" * (t.alloc != "auto") + " @nonnegative" * t.nonnegative
        self.say(f"{kind} {name} : {t.type.dtype}[{dims}]{hint}")
        self.defined.add(t.name)

    def say(self, line: str, depth: int = 1) -> None:
        self.lines.append(INDENT * depth + line)

    # --- commands in program order ---------------------------------------------------------
    def commands(self) -> None:
        open_stream: int | None = None
        for cmd in self.order:
            stream = getattr(cmd, "stream", None) if not isinstance(cmd, Sync) else None
            if stream != open_stream and open_stream is not None:
                self.say("}")
                open_stream = None
            if stream is not None and open_stream is None:
                self.say(f"on {self.names[f'stream:{stream}']} {{")
                open_stream = stream
            for line in self.command(cmd):
                self.say(line, 2 if open_stream is not None else 1)
            joined = self.joined()
            if joined and open_stream is not None:
                self.say("}")
                open_stream = None
            for line in joined:
                self.say(line)
        if open_stream is not None:
            self.say("}")

    def joined(self) -> list[str]:
        """The concatenations whose parts are now all defined, written outside any ``on``
        block: a concatenation on no stream is one lowering may compute in place again."""
        ready = [n for n in self.joins if all(p in self.defined for p in n.inputs)]
        self.joins = [n for n in self.joins if n not in ready]
        return [self.statement(n) for n in ready]

    def command(self, cmd: Any) -> list[str]:
        if isinstance(cmd, Launch):
            return self.task(cmd)
        if isinstance(cmd, Record):
            return [f"record {self.event(cmd.event)}"]
        if isinstance(cmd, Wait):
            return [f"wait {self.event(cmd.event)}"]
        if isinstance(cmd, Barrier):
            return ["barrier"]
        if isinstance(cmd, Callback):
            after = self.last_output.get(cmd.stream)
            blocking = " blocking" if cmd.blocking else ""
            return [f'callback "{cmd.name}" after {after}{blocking}'] if after else []
        if isinstance(cmd, Sync):
            if cmd.kind == "device":
                return ["sync"]
            if cmd.kind == "stream":
                return [f"sync {self.names[f'stream:{cmd.target}']}"]
            assert cmd.target is not None
            return [f"sync {self.event(cmd.target)}"]
        raise UsageError(f"--emit rtg cannot print a {type(cmd).__name__} command")

    def task(self, cmd: Launch) -> list[str]:
        task = self.compiled.tasks[cmd.task]
        if task.op == "h2d":
            assert task.host is not None
            self.defined.add(task.host)
            host = self.ref(task.host)
            if "rows" in task.attrs:  # a part: the source goes on naming the input itself
                a, b = task.attrs["rows"]
                part = self.name(f"{task.host}@device[{a}:{b}]")
                return [f"{part} = to_device({host}, rows = [{a}, {b}])"]
            self.on_device[task.host] = self.name(task.host + "@device")
            return [f"{self.on_device[task.host]} = to_device({host})"]
        if task.op == "d2h" and "rows" in task.attrs:  # a part of an output, in its rows
            part = task.inputs[0].tensor
            lines = self.views_for([part])
            return [*lines, f"{self.name(part + '@host')} = to_host({self.ref(part)})"]
        if task.op == "d2h":
            assert task.host is not None
            lines = self.views_for([task.host])  # an output that is a view of a task's result
            out = self.ref(task.host)
            return [*lines, f"output {out} = to_host({out})"]
        node = self.kernels.pop(0) if task.op == "kernel" else self.producer[task.output.tensor]
        lines = self.views_for(node.inputs)
        lines.append(self.statement(node))
        self.last_output[cmd.stream] = self.ref(node.output)
        return lines

    def views_for(self, names: Iterable[str]) -> list[str]:
        """Statements for the views (layout ops with no task) these inputs need first."""
        lines: list[str] = []
        for name in names:
            if name in self.defined or self.program.tensors[name].kind != "value":
                continue
            node = self.producer[name]
            lines += self.views_for(node.inputs)
            lines.append(self.statement(node))
        return lines

    def statement(self, node: OpNode) -> str:
        self.defined.add(node.output)
        out = self.ref(node.output)
        if node.output in self.copied_in_parts:
            out = f"output {out}"
        if node.op == "fused":
            return f"{out} = {self.fused(node)}"
        args = [self.ref(n) for n in node.inputs]
        args += self.attrs(node.op, node.attrs)
        if node.after:
            args.append(f"after = [{', '.join(self.ref(n) for n in node.after)}]")
        return f"{out} = {node.op}({', '.join(args)})"

    def attrs(self, op_name: str, attrs: Any) -> list[str]:
        op = lookup(op_name)
        assert op is not None, op_name
        out = []
        for key, value in dict(attrs).items():
            spec = op.attrs.get(key)
            if spec is not None and value == spec.default and not spec.required:
                continue
            kind = spec.kind if spec is not None else "int"
            out.append(f"{key} = {self.value(kind, value)}")
        return out

    def value(self, kind: str, value: Any) -> str:
        if kind == "names":
            return "[" + ", ".join(self.ref(n) for n in value) + "]"
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, tuple | list):
            return "[" + ", ".join(self.value(kind, v) for v in value) + "]"
        if kind in _SYMBOLIC or isinstance(value, str):
            return str(value)
        return _number(value)

    def fused(self, node: OpNode) -> str:
        if node.attrs.get("fast_math"):
            raise UsageError(
                "--emit rtg cannot print a fast-math fused kernel",
                hint="fused blocks round as the unfused ops do; drop --fast-math",
            )
        values = [self.ref(n) for n in node.inputs]
        parts = []
        body = node.attrs["body"]
        for k, (name, args, attrs, _, _) in enumerate(body):
            call = [values[a] for a in args] + self.attrs(name, dict(attrs))
            text = f"{name}({', '.join(call)})"
            if k == len(body) - 1:
                parts.append(f"return {text}")
            else:
                local = self.name(f"_f{k}", f"{node.output}:{k}")
                values.append(local)
                parts.append(f"{local} = {text}")
        return "fused { " + "; ".join(parts) + " }"


def program_order(compiled: StreamProgram, own_events: int) -> list[Command]:
    """``compiled``'s commands in the order the barrier pass emitted them, before
    ``order_submissions`` batched them, with one event id per compiler record.

    The batching keeps each stream's commands in order, each of the program's own events
    (ids below ``own_events``) its records and waits in order, and every host-blocking command
    (a sync, a copy of pageable memory) where it was. So between two host-blocking commands the
    barrier pass's order is the streams' sequences merged by task id — a task's waits and
    barrier mark just before its launch, its records and callbacks just after — as long as
    that keeps every wait after its record (it does, unless the policy submitted tasks out of
    program order, as ``list`` may: then the lowest task id that can go next goes next).
    Compiler event ids (``own_events`` and up) are reused once their last wait is submitted;
    numbered per record in submission order, each wait naming the record it pairs with, they
    pair the same in any order that keeps each wait after its record.
    """
    pageable = {h.name for h in compiled.host_tensors if not h.pinned}
    blocking = {t.id for t in compiled.tasks if t.op in ("h2d", "d2h") and t.host in pageable}
    commands = per_record_events(compiled.commands, own_events)
    merge = _Merge(commands, own_events)
    order: list[Command] = []
    segment: list[Command] = []
    for c in commands:
        if isinstance(c, Sync | Alloc | Free) or (isinstance(c, Launch) and c.task in blocking):
            order += merge.segment(segment)
            order.append(c)
            merge.emitted(c)
            segment = []
        else:
            segment.append(c)
    return order + merge.segment(segment)


def per_record_events(commands: Iterable[Command], first: int) -> list[Command]:
    """``commands`` with each record of a compiler event (id ``first`` and up) given the next
    id and each wait the id of the record it pairs with."""
    current: dict[int, int] = {}
    out: list[Command] = []
    fresh = first
    for c in commands:
        if isinstance(c, Record) and c.event >= first:
            current[c.event], fresh = fresh, fresh + 1
            c = replace(c, event=current[c.event])
        elif isinstance(c, Wait) and c.event >= first:
            c = replace(c, event=current[c.event])
        out.append(c)
    return out


class _Merge:
    """Merges each segment's stream commands by task id, in chunks: a launch with the waits
    and barrier mark before it and the records and callbacks after it."""

    def __init__(self, commands: list[Command], own_events: int) -> None:
        self.own_events = own_events
        self.recorded: set[int] = set()  # compiler events recorded so far
        self.uses: dict[int, list[int]] = {}  # own event → its commands' positions, in order
        for k, c in enumerate(commands):
            if isinstance(c, Record | Wait) and c.event < own_events:
                self.uses.setdefault(c.event, []).append(k)
        self.position = {id(c): k for k, c in enumerate(commands)}
        self.next_use = dict.fromkeys(self.uses, 0)

    def segment(self, segment: list[Command]) -> list[Command]:
        chunks = _chunks(segment)
        out: list[Command] = []
        while any(chunks.values()):
            heads = sorted((q[0][-1], s) for s, q in chunks.items() if q)
            s = next((s for _, s in heads if self.ready(chunks[s][0][0])), heads[0][1])
            for c in chunks[s].pop(0)[0]:
                out.append(c)
                self.emitted(c)
        return out

    def ready(self, chunk: list[Command]) -> bool:
        """Whether every wait in ``chunk`` comes after its record, and the program's own
        events keep their order, if ``chunk`` goes next."""
        recorded = set(self.recorded)
        next_use = dict(self.next_use)
        for c in chunk:
            if not isinstance(c, Record | Wait):
                continue
            if c.event < self.own_events:
                uses = self.uses[c.event]
                if uses[next_use[c.event]] != self.position[id(c)]:
                    return False
                next_use[c.event] += 1
            elif isinstance(c, Record):
                recorded.add(c.event)
            elif c.event not in recorded:
                return False
        return True

    def emitted(self, c: Command) -> None:
        if isinstance(c, Record | Wait) and c.event < self.own_events:
            self.next_use[c.event] += 1
        elif isinstance(c, Record):
            self.recorded.add(c.event)


def _chunks(segment: list[Command]) -> dict[int, list[tuple[list[Command], int]]]:
    """Each stream's commands of ``segment`` cut into chunks, each with the id of the task it
    launches (a last chunk of commands before a blocking copy sorts after every task)."""
    chunks: dict[int, list[tuple[list[Command], int]]] = {}
    open_chunk: dict[int, list[Command]] = {}
    for c in segment:
        s = c.stream  # type: ignore[union-attr]
        queue = chunks.setdefault(s, [])
        chunk = open_chunk.get(s)
        if isinstance(c, Record | Callback) and chunk is None:
            if not queue:  # after the blocking copy that began the segment: first
                queue.append(([], -1))
            queue[-1][0].append(c)  # just after its stream's launch
            continue
        if chunk is None:
            chunk = open_chunk[s] = []
        chunk.append(c)
        if isinstance(c, Launch):
            queue.append((chunk, c.task))
            del open_chunk[s]
    for s, chunk in open_chunk.items():
        chunks[s].append((chunk, sys.maxsize))
    return chunks


def _number(value: Any) -> str:
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e16:
            return f"{value:.1f}"
        return repr(value)
    return format_number(value)
