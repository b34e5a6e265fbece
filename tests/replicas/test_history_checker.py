"""The history checker itself: it passes histories a store may produce
(concurrent calls, calls of unknown outcome that did or did not happen) and
fails hand-made ones with a write applied twice, a stale read, or an order
no sequential run explains."""

from __future__ import annotations

from tests.support.history import LOG, REGISTER, Op, check, linearizable


def op(p, f, arg, t0, t1, ok=True, out=None, key="k") -> Op:
    return Op(p, key, f, arg, invoke=t0, complete=None if ok is None else t1, ok=ok, out=out)


def test_concurrent_cas_with_unknown_outcomes_is_linearizable():
    ops = [
        op(1, "create", "w0", 0, 1),
        op(1, "read", None, 2, 3, out="w0"),
        op(2, "read", None, 2, 3, out="w0"),
        op(1, "cas", ("w0", "w1"), 4, 6, ok=None),  # happened: p2 saw it
        op(2, "cas", ("w0", "w2"), 4, 6, ok=False),
        op(2, "read", None, 7, 8, out="w1"),
        op(2, "cas", ("w1", "w3"), 9, 10),
        op(1, "cas", ("w1", "w4"), 9, 11, ok=None),  # did not happen
        op(1, "read", None, 12, 13, out="w3"),
    ]
    report = check({"k": ops}, REGISTER)
    assert report.ok, report
    assert report.unknown == 2


def test_a_refused_write_that_was_applied_is_reported_as_applied_twice():
    ops = [
        op(1, "create", "w0", 0, 1),
        op(1, "read", None, 2, 3, out="w0"),
        op(1, "cas", ("w0", "w1"), 4, 5, ok=False),  # committed, answered ABORTED
        op(2, "read", None, 6, 7, out="w1"),
        op(2, "cas", ("w1", "w2"), 8, 9),
        op(1, "read", None, 10, 11, out="w2"),
        op(1, "cas", ("w2", "w3"), 12, 13),  # the caller's loop: its increment again
    ]
    report = check({"k": ops}, REGISTER)
    assert not report.ok
    assert len(report.findings) == 1 and "applied twice" in report.findings[0], report
    assert "p1 cas(('w0', 'w1')) refused" in report.findings[0]
    assert not linearizable(ops, REGISTER).ok


def test_a_read_that_misses_an_acknowledged_write_is_stale():
    ops = [
        op(1, "create", "w0", 0, 1),
        op(1, "cas", ("w0", "w1"), 2, 3),
        op(2, "read", None, 4, 5, out="w0"),  # began after w1 was acknowledged
    ]
    report = check({"k": ops}, REGISTER)
    assert [f.split(":")[1].strip() for f in report.findings] == ["stale read"], report
    # Overlapping the write instead, the same read is fine.
    ops[2] = op(2, "read", None, 2.5, 5, out="w0")
    assert check({"k": ops}, REGISTER).ok


def test_reads_going_back_in_time_are_not_linearizable():
    """No acknowledged write is missed (the write's outcome is unknown), yet
    no order explains a read of w1 followed by a read of w0."""
    ops = [
        op(1, "create", "w0", 0, 1),
        op(1, "cas", ("w0", "w1"), 2, None, ok=None),
        op(2, "read", None, 3, 4, out="w1"),
        op(3, "read", None, 5, 6, out="w0"),
    ]
    report = check({"k": ops}, REGISTER)
    assert len(report.findings) == 1 and "not linearizable" in report.findings[0], report


def test_a_context_deleted_and_created_again():
    good = [
        op(1, "append", (0, "a"), 0, 1),
        op(2, "get", None, 2, 3, out=("a",)),
        op(1, "delete", None, 4, 5, out=True),
        op(2, "append", (0, "b"), 6, 7),
        op(1, "get", None, 8, 9, out=("b",)),
        op(3, "append", (1, "c"), 8.5, None, ok=None),
        op(3, "get", None, 10, 11, out=("b", "c")),
    ]
    assert check({"c": good}, LOG).ok
    refused = [*good[:2], op(1, "delete", None, 2.5, 2.6, ok=False), *good[2:]]
    assert check({"c": refused}, LOG).ok
    stale = [*good[:5], op(3, "get", None, 10, 11, out=None)]  # NOT_FOUND after "b"
    report = check({"c": stale}, LOG)
    assert len(report.findings) == 1 and "stale read" in report.findings[0], report
    old_copy = [*good[:5], op(3, "get", None, 10, 11, out=("a",))]
    assert "stale read" in check({"c": old_copy}, LOG).findings[0]


def test_a_turn_answered_aborted_that_was_appended_is_reported():
    ops = [
        op(1, "append", (0, "a"), 0, 1),
        op(1, "append", (1, "b"), 2, 3, ok=False),  # committed, answered ABORTED
        op(2, "get", None, 4, 5, out=("a", "b")),
        op(1, "append", (2, "b2"), 6, 7),
    ]
    report = check({"c": ops}, LOG)
    assert len(report.findings) == 1 and "applied twice" in report.findings[0], report


def test_an_earlier_version_read_differently_is_reported():
    def at(o, inc, v):
        o.version = (inc, v)
        return o

    good = [
        op(1, "append", (0, "a"), 0, 1),
        at(op(2, "get", None, 2, 3, out=("a",)), "g1", 1),
        op(1, "append", (1, "b"), 4, 5),
        at(op(2, "get_at", 1, 6, 7, out=("a",)), "g1", 1),
        at(op(3, "get_at", 1, 6, 8, out=None), "g2", 1),  # another incarnation, not kept
        at(op(2, "get", None, 8, 9, out=("a", "b")), "g1", 2),
    ]
    assert check({"c": good}, LOG).ok
    changed = [*good, at(op(3, "get_at", 1, 10, 11, out=("a", "b")), "g1", 1)]
    report = check({"c": changed}, LOG)
    assert len(report.findings) == 1 and "version changed" in report.findings[0], report
    other = [*good, at(op(3, "get_at", 1, 10, 11, out=("x",)), "g2", 1)]
    assert check({"c": other}, LOG).ok  # version 1 of another incarnation
