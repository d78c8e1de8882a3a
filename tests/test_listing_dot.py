"""Listings and DOT say which record a wait pairs with, keep the program's event names, and
draw streams, event hand-offs and a legend."""

from __future__ import annotations

import re
from pathlib import Path

import rtgraph
from rtgraph.stream_program.listing import event_edges, event_labels, format_listing, to_dot
from rtgraph.stream_program.program import Record, Wait

MODELS = Path(__file__).resolve().parent.parent / "models"

KERNELS = """
device "toy"
program k() {
    a = kernel(unit = cube, us = 2)
    b = kernel(unit = vector, us = 1, after = [a])
    c = kernel(unit = dma, us = 1, after = [b])
}
"""


def _compiled(source_or_path, **kw):
    spec = rtgraph.device("toy")
    if isinstance(source_or_path, Path):
        program = rtgraph.load(source_or_path, device=spec)
    else:
        program = rtgraph.parse(source_or_path, "k.rtg")
    return rtgraph.compile(program, device=spec, **kw)


def test_each_wait_names_the_generation_of_the_latest_record_before_it():
    compiled = _compiled(MODELS / "attention.rtg", streams="by-unit")
    labels = event_labels(compiled)
    seen: dict[int, int] = {}
    for c in compiled.commands:
        if type(c) is Record:
            seen[c.event] = seen.get(c.event, 0) + 1
            assert labels[id(c)] == f"e{c.event}.{seen[c.event]}"
        elif type(c) is Wait:
            assert labels[id(c)] == f"e{c.event}.{seen.get(c.event, 0)}"
    reused = [e for e, n in seen.items() if n > 1]
    assert reused, "attention by-unit reuses an event id: the case the generation is for"


def test_the_programs_own_events_keep_their_names_and_the_footer_says_who_inserted_what():
    compiled = _compiled(MODELS / "overlap.rtg")
    text = format_listing(compiled)
    assert "record copied.1" in text and "wait   copied.1" in text
    assert "; inserted by the compiler: hazards" in text
    assert "the program's own events: 2" in text


def test_dot_has_a_cluster_per_stream_event_edges_and_a_legend():
    compiled = _compiled(KERNELS, streams="by-unit")
    dot = to_dot(compiled)
    assert len(re.findall(r"subgraph cluster_stream\d+", dot)) == len(compiled.streams)
    edges = event_edges(compiled)
    assert [(s, d) for s, d, _ in edges] == [(0, 1), (1, 2)]  # a → b → c, one hand-off each
    for src, dst, name in edges:
        assert f't{src} -> t{dst} [color="#C0392B", penwidth=1.6, label="{name}"];' in dot
    assert "cluster_legend" in dot and "event hand-off" in dot


def test_a_single_stream_program_has_no_event_edges():
    compiled = _compiled(KERNELS, streams="single")
    assert event_edges(compiled) == []
    assert 'color="#C0392B"' not in to_dot(compiled)
