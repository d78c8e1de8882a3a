"""The byte-range access tracker: RAW, WAR and WAW found exactly, partial overlaps included."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rtgraph.stream_program.hazards import AccessTracker


def kinds(conflicts):
    return sorted((c.src, c.dst, c.kind, c.lo, c.hi) for c in conflicts)


def test_raw_war_waw_on_one_region():
    t = AccessTracker()
    assert t.access(0, [], [(0, 100)]) == []
    assert kinds(t.access(1, [(0, 100)], [])) == [(0, 1, "RAW", 0, 100)]
    assert kinds(t.access(2, [(50, 60)], [])) == [(0, 2, "RAW", 50, 60)]
    # A write after two reads conflicts with both readers (WAR), not with the old writer.
    assert kinds(t.access(3, [], [(0, 100)])) == [
        (1, 3, "WAR", 0, 100),
        (2, 3, "WAR", 50, 60),
    ]
    # A write right after a write with no read between: WAW.
    assert kinds(t.access(4, [], [(10, 20)])) == [(3, 4, "WAW", 10, 20)]


def test_disjoint_ranges_do_not_conflict():
    t = AccessTracker()
    t.access(0, [], [(0x1000, 0x1100)])
    assert t.access(1, [(0x2000, 0x2100)], []) == []
    assert t.access(2, [], [(0x1100, 0x1200)]) == []  # adjacent, half-open: no overlap


def test_partial_overlap_reports_only_the_shared_bytes():
    t = AccessTracker()
    t.access(0, [], [(0, 64)])
    t.access(1, [], [(64, 128)])
    assert kinds(t.access(2, [(32, 96)], [])) == [(0, 2, "RAW", 32, 64), (1, 2, "RAW", 64, 96)]


def test_a_task_never_conflicts_with_itself():
    t = AccessTracker()
    assert t.access(0, [(0, 8)], [(0, 8)]) == []
    assert kinds(t.access(1, [(0, 8)], [(0, 8)])) == [(0, 1, "RAW", 0, 8)]


@given(
    st.lists(
        st.tuples(
            st.lists(st.tuples(st.integers(0, 60), st.integers(1, 12)), max_size=2),
            st.lists(st.tuples(st.integers(0, 60), st.integers(1, 12)), max_size=2),
        ),
        max_size=25,
    )
)
def test_every_conflicting_pair_is_ordered_by_reported_edges(accesses):
    """Brute force: any two tasks touching a common byte, one writing, are connected by a path
    of reported conflicts (the edges are a sufficient set of ordering constraints)."""
    t = AccessTracker()
    edges: dict[int, set[int]] = {}
    ranges = []
    for i, (reads, writes) in enumerate(accesses):
        r = [(a, a + n) for a, n in reads]
        w = [(a, a + n) for a, n in writes]
        ranges.append((r, w))
        for c in t.access(i, r, w):
            assert c.src < i
            edges.setdefault(c.src, set()).add(i)

    def reach(a, b):
        stack, seen = [a], set()
        while stack:
            x = stack.pop()
            if x == b:
                return True
            for y in edges.get(x, ()):
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        return False

    def overlap(xs, ys):
        return any(a < d and c < b for a, b in xs for c, d in ys)

    for j in range(len(ranges)):
        for i in range(j):
            ri, wi = ranges[i]
            rj, wj = ranges[j]
            if overlap(wi, rj) or overlap(ri, wj) or overlap(wi, wj):
                assert reach(i, j), (i, j)
