"""The read request and the page-token codec, in domain terms (no server).

Over gRPC the same rules are held by test_context_reads.py,
test_contexts_validation.py and the model-based suite (test_read_model.py);
here each refusal is pinned to the field it names, with and without the
``read.`` prefix a turn's read carries.
"""

from __future__ import annotations

import pytest

from ctxd_sidecar.core.contexts import pagetoken, views
from ctxd_sidecar.core.contexts.model import USER, ContextState, Msg
from ctxd_sidecar.core.contexts.reads import CACHED, INFO, LATEST, ReadRequest
from ctxd_sidecar.core.errors import InvalidArgument


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"view": "nope"}, "view"),
        ({"consistency": "sometimes"}, "consistency"),
        ({"since": -1}, "since_version"),
        ({"incarnation": "abc"}, "since_incarnation"),
        ({"since": 1, "incarnation": "x" * (views.MAX_INCARNATION + 1)}, "since_incarnation"),
        ({"page_size": -1}, "page_size"),
        ({"fmt": "yaml", "view": views.SLICE}, "format"),
        ({"fmt": "openai"}, "format"),  # goes with the slice only
        ({"last_n": -1}, "last_n"),
        ({"last_n": 3, "since": 2}, "last_n"),
        ({"at_version": -1}, "at_version"),
        ({"at_version": 3, "since": 2}, "at_version"),  # an earlier version is read whole
    ],
)
@pytest.mark.parametrize("prefix", ["", "read."])
def test_a_request_whose_fields_do_not_go_together_is_refused_naming_the_field(
    fields, named, prefix
):
    with pytest.raises(InvalidArgument) as exc:
        ReadRequest(prefix=prefix, **fields)
    assert exc.value.field == prefix + named


def test_a_request_that_holds_together_is_built():
    req = ReadRequest(
        context_id="c", view=views.SLICE, since=3, incarnation="ab12cd34", fmt="anthropic"
    )
    assert (req.since, req.fmt, req.at_version) == (3, "anthropic", 0)
    assert ReadRequest(view=INFO).view == INFO


def test_a_later_page_reads_the_cached_copy_whatever_the_consistency():
    assert ReadRequest().latest is None
    assert ReadRequest(consistency=LATEST).latest is True
    assert ReadRequest(consistency=CACHED).latest is False
    assert ReadRequest(consistency=LATEST, page_token="p1.x").latest is False


def test_a_turn_reads_its_own_context_from_the_first_page():
    req = ReadRequest(prefix="read.")
    assert req.in_turn("c").context_id == "c"
    with pytest.raises(InvalidArgument) as exc:  # the version the turn made, not an earlier one
        ReadRequest(prefix="read.", at_version=2).in_turn("c")
    assert exc.value.field == "read.at_version"
    with pytest.raises(InvalidArgument) as exc:
        ReadRequest(context_id="other", prefix="read.").in_turn("c")
    assert exc.value.field == "read.context_id"
    with pytest.raises(InvalidArgument) as exc:
        ReadRequest(page_token="p1.x", prefix="read.").in_turn("c")
    assert exc.value.field == "read.page_token"
    # A committed turn reads the cached copy (it holds the turn); a replay the default.
    assert req.after_turn(replayed=False) is False
    assert req.after_turn(replayed=True) is None
    assert ReadRequest(consistency=LATEST).after_turn(replayed=False) is True


def test_a_token_reads_back_the_parts_it_was_packed_with():
    token = pagetoken.pack(pagetoken.TRANSCRIPT, "ab12cd34", 7, "slice", 41, "")
    assert token.startswith(pagetoken.TRANSCRIPT)
    assert pagetoken.unpack(token, pagetoken.TRANSCRIPT, 5) == ("ab12cd34", 7, "slice", 41, "")


@pytest.mark.parametrize(
    "token",
    [
        pagetoken.pack(pagetoken.PROVIDER, "g", 1, 2, 3, 4),  # the other pager's
        pagetoken.pack(pagetoken.TRANSCRIPT, "g", 1, 2, 3),  # a part short
        pagetoken.pack(pagetoken.TRANSCRIPT, "g", 1, 2, 3, 4, 5),  # a part over
        pagetoken.TRANSCRIPT + "!!!",
        pagetoken.TRANSCRIPT + "e30",  # {}: not an array
        pagetoken.pack(pagetoken.TRANSCRIPT, "x" * 300, 1, 2, 3, 4),  # over MAX_TOKEN
        "",
    ],
)
def test_a_token_this_pager_did_not_write_is_refused(token):
    with pytest.raises(InvalidArgument) as exc:
        pagetoken.unpack(token, pagetoken.TRANSCRIPT, 5)
    assert exc.value.field == "page_token"


def test_an_optional_last_part_may_be_absent():
    short = pagetoken.pack(pagetoken.PROVIDER, "g", "openai", 3, "d", "")
    assert len(pagetoken.unpack(short, pagetoken.PROVIDER, 6, 1)) == 5
    with pytest.raises(InvalidArgument):
        pagetoken.unpack(short, pagetoken.PROVIDER, 6)


# -- pages measured once ---------------------------------------------------------------
def _big(n: int, size: int) -> list[Msg]:
    return [Msg(USER, text=f"{i}" + "x" * size) for i in range(n)]


def test_a_page_its_budget_cut_is_measured_again_when_the_message_past_it_changed():
    """Pages are measured once and remembered by their first message; a
    truncation that takes the message that did not fit, and appends that fit
    in its place, make the same page longer."""
    st = ContextState(id="c", kind="conversation", gen="g", version=1)
    third = views.PAGE_BYTES // 3
    for i, m in enumerate(_big(4, third), start=1):
        st.add_message(m.assigned(i, 1000 + i, ver=1))
    first = views.read(st, views.SLICE)
    assert len(first.messages) == 2  # the third does not fit with the frames
    again = views.read(st, views.SLICE)
    assert [m.seq for m in again.messages] == [1, 2]
    kept = st.messages[:2]
    st.messages = kept  # truncated: the third and fourth go
    for i, m in enumerate(_big(2, 10), start=5):
        st.add_message(m.assigned(i, 1000 + i, ver=2))
    assert [m.seq for m in views.read(st, views.SLICE).messages] == [1, 2, 5, 6]


def test_a_page_of_its_limit_is_remembered_whatever_follows_it():
    st = ContextState(id="c", kind="conversation", gen="g", version=1)
    for i, m in enumerate(_big(5, 10), start=1):
        st.add_message(m.assigned(i, 1000 + i, ver=1))
    assert [m.seq for m in views.read(st, views.SLICE, size=2).messages] == [1, 2]
    st.messages = st.messages[:1]  # the page's last message goes
    assert [m.seq for m in views.read(st, views.SLICE, size=2).messages] == [1]
    big = _big(1, views.PAGE_BYTES)[0].assigned(6, 1006, ver=2)
    st.add_message(big)  # in the last one's place, too big to share a page
    assert [m.seq for m in views.read(st, views.SLICE, size=2).messages] == [1]


def test_a_token_remembered_for_one_value_is_not_given_for_an_equal_one_of_another_type():
    one = pagetoken.pack(pagetoken.TRANSCRIPT, "g", 1, "slice", 1, "")
    true = pagetoken.pack(pagetoken.TRANSCRIPT, "g", True, "slice", 1, "")
    assert one != true
    st = ContextState(id="c", kind="conversation", gen="g", version=1)
    st.add_message(Msg(USER, text="hi").assigned(1, 1000, ver=1))
    with pytest.raises(InvalidArgument):
        views.read(st, views.SLICE, token=true)  # True is no count
