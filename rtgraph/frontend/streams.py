"""Streams, events and the host: ``stream``, ``event``, ``on``, ``record``, ``wait``,
``barrier``, ``sync`` and ``callback``.

Streams and events are program-wide resources: they are declared at the top of the program and
visible in functions too (a function called inside ``on s { }`` may record and wait).
Ops inside ``on s { }`` go to stream ``s`` in order; ``record``/``wait``/``barrier`` exist
only there. A ``wait`` must follow some ``record`` of its event in program order (CANN
rejects a wait on an event never recorded).
"""

from __future__ import annotations

from rtgraph.errors import did_you_mean
from rtgraph.frontend import ast, consteval
from rtgraph.frontend.calls import PRODUCED_KINDS
from rtgraph.frontend.declarations import DeclarationChecker
from rtgraph.frontend.values import POISON, EventArray, EventRef, StreamRef, describe
from rtgraph.ir.graph import BarrierNode, CallbackNode, RecordNode, SyncNode, Tensor, WaitNode

#: Stream priorities, as the runtime's (0 is the highest).
PRIORITIES = range(8)
#: The longest event array (a device has at most a few thousand event ids).
MAX_EVENT_ARRAY = 65_536


class StreamChecker(DeclarationChecker):
    """Explicit streams and events, and host-side sync and callbacks."""

    streams: list[str]
    events: list[str]
    priorities: dict[str, int]
    recorded: set[str]

    def s_streams(self, st: ast.StreamDecl) -> None:
        if not self.at_top(st, "stream"):
            return
        for item in st.streams:
            name = item.name.name
            priority: int | None = None
            for kw in item.options:
                if kw.name.name != "priority":
                    self.error(
                        f"unknown stream option '{kw.name.name}'",
                        kw.name.span,
                        hint=did_you_mean(kw.name.name, ["priority"]) or "streams take priority=",
                    )
                    continue
                priority = self.compile_time_int(kw.value, "a stream priority")
                if priority is not None and priority not in PRIORITIES:
                    self.error(
                        f"stream priority {priority} is out of range",
                        kw.value.span,
                        hint="priorities are 0 (highest) to 7",
                    )
                    priority = None
            if self.scope.lookup(name) is not None:
                self.rebound(item.name)
                continue
            self.declare(item.name, StreamRef(name), "stream", self.globals)
            self.streams.append(name)
            if priority is not None:
                self.priorities[name] = priority

    def s_events(self, st: ast.EventDecl) -> None:
        if not self.at_top(st, "event"):
            return
        for item in st.events:
            ident = item.name
            count = self.event_count(item)
            if self.scope.lookup(ident.name) is not None:
                self.rebound(ident)
                continue
            if item.count is None:
                self.declare(ident, EventRef(ident.name), "event", self.globals)
                self.events.append(ident.name)
            elif count is None:
                self.declare(ident, POISON, "event", self.globals)
            else:
                self.declare(ident, EventArray(ident.name, count), "event", self.globals)
                self.events.extend(f"{ident.name}[{i}]" for i in range(count))

    def event_count(self, item: ast.EventItem) -> int | None:
        """The length of ``event e[N]`` (None: a single event, or an error reported)."""
        if item.count is None:
            return None
        count = self.compile_time_int(item.count, "the length of an event array")
        if count is not None and not 0 < count <= MAX_EVENT_ARRAY:
            self.error(
                f"event array length {count} is not between 1 and {MAX_EVENT_ARRAY:,}",
                item.count.span,
            )
            return None
        return count

    def event(self, ref: ast.EventRef) -> str | None:
        """The IR name of the event ``ref`` names (``e`` or ``e[i]``), or None after reporting."""
        ident = ref.name
        bound = self.scope.lookup(ident.name)
        if bound is None or bound.value is POISON or not isinstance(bound.value, EventArray):
            event = self.resolve(ident, EventRef, "event", self.events)
            if event is not None and ref.index is not None:
                self.error(
                    f"'{event}' is a single event, not an array",
                    ref.index.span,
                    hint=f"declare an array to index it: event {event}[N]",
                )
                return None
            return event
        array = bound.value
        if ref.index is None:
            self.error(
                f"event array '{array.name}' needs an index",
                ref.span,
                hint=f"name one of its events: {array.name}[0] to {array.name}[{array.count - 1}]",
            )
            return None
        index = self.eval(ref.index)
        if index is POISON:
            return None
        i = consteval.as_int(index)
        if i is None:
            self.error(
                f"index of event array '{array.name}' must be a compile-time integer, got "
                f"{describe(index)}",
                ref.index.span,
                hint="events are resolved at compile time: index with a constant or a loop "
                "variable (e.g. e[i % 2])",
            )
            return None
        if not 0 <= i < array.count:
            self.error(
                f"index {i} is out of range for event array '{array.name}' of length {array.count}",
                ref.index.span,
                hint=f"valid indices are 0 to {array.count - 1}",
            )
            return None
        return f"{array.name}[{i}]"

    def resolve(self, ident: ast.Ident, kind: type, word: str, known: list[str]) -> str | None:
        """The stream or event ``ident`` names, or None after reporting."""
        bound = self.scope.lookup(ident.name)
        if bound is None:
            hint = did_you_mean(ident.name, known) or f"declare it first: {word} {ident.name}"
            self.error(f"unknown {word} '{ident.name}'", ident.span, hint)
            return None
        if bound.value is POISON:
            return None
        if not isinstance(bound.value, kind):
            article = "an" if word[0] in "aeiou" else "a"
            self.error(f"expected {article} {word}, not {describe(bound.value)}", ident.span)
            return None
        return ident.name

    def s_on(self, st: ast.OnBlock) -> None:
        stream = self.resolve(st.stream, StreamRef, "stream", self.streams)
        if self.stream is not None:
            self.error(
                "on blocks cannot be nested",
                st.span.to(st.stream.span),
                hint=f"this block is already inside 'on {self.stream}'",
            )
            return
        self.stream = stream or st.stream.name
        try:
            self.run_block(st.body)
        finally:
            self.stream = None

    def in_stream(self, stmt: ast.Stmt, keyword: str, example: str) -> bool:
        if self.stream is not None or self.abstract:
            return True
        self.error(
            f"{keyword} must be inside an `on` block",
            stmt.span,
            hint=f"write `on s {{ {example} }}` to say which stream it belongs to",
        )
        return False

    def s_record(self, st: ast.Record) -> None:
        event = self.event(st.event)
        if self.in_stream(st, "record", f"record {st.event.name.name}") and event is not None:
            self.ir.emit(RecordNode(event, self.stream or "", st.span))
            self.recorded.add(event)

    def s_wait(self, st: ast.Wait) -> None:
        event = self.event(st.event)
        if not self.in_stream(st, "wait", f"wait {st.event.name.name}") or event is None:
            return
        if event not in self.recorded and not self.abstract:
            self.error(
                f"wait on event '{event}', which is never recorded before this point",
                st.span,
                hint=f"record it earlier on the producing stream: on s {{ ...; record {event} }}",
            )
            return
        self.ir.emit(WaitNode(event, self.stream or "", st.span))

    def s_barrier(self, st: ast.Barrier) -> None:
        if self.in_stream(st, "barrier", "...; barrier; ..."):
            self.ir.emit(BarrierNode(self.stream or "", st.span))

    def s_sync(self, st: ast.Sync) -> None:
        if st.target is None:
            self.ir.emit(SyncNode("device", None, st.span))
            return
        name = st.target.name.name
        bound = self.scope.lookup(name)
        if bound is not None and (
            isinstance(bound.value, EventArray) or st.target.index is not None
        ):
            event = self.event(st.target)
            if event is not None:
                self.ir.emit(SyncNode("event", event, st.span))
        elif bound is None:
            hint = did_you_mean(name, [*self.streams, *self.events])
            self.error(f"unknown stream or event '{name}'", st.target.span, hint)
        elif isinstance(bound.value, StreamRef):
            self.ir.emit(SyncNode("stream", name, st.span))
        elif isinstance(bound.value, EventRef):
            self.ir.emit(SyncNode("event", name, st.span))
        elif bound.value is not POISON:
            self.error(
                f"sync waits for a stream or an event, not for {describe(bound.value)}",
                st.target.name.span,
                hint="`sync` alone waits for the whole device",
            )

    def s_callback(self, st: ast.Callback) -> None:
        name = st.after.name
        bound = self.scope.lookup(name)
        if bound is None:
            self.undefined(name, st.after.span)
            return
        value = bound.value
        if value is POISON:
            return
        if not isinstance(value, Tensor) or value.kind not in PRODUCED_KINDS:
            self.error(
                "a callback runs after the task that computes its tensor; no task computes "
                f"{describe(value)}",
                st.after.span,
            )
            return
        self.ir.emit(CallbackNode(st.name, value.name, st.span, st.blocking))
