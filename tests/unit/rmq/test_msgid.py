"""Offset message ids read back (``parse_offset_msg_id``) and the query headers' fields."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.codec import BadRequest, RemotingCommand
from rmq.codes import RequestCode
from rmq.headers import QueryMessageHeader, QueryMessageResponseHeader, ViewMessageHeader
from rmq.msgid import offset_msg_id, parse_offset_msg_id, uniq_key


@given(
    ip=st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(str),
    port=st.integers(0, 2**31 - 1),
    offset=st.integers(0, 2**63 - 1),
)
def test_an_offset_message_id_reads_back(ip: str, port: int, offset: int) -> None:
    assert parse_offset_msg_id(offset_msg_id(ip, port, offset)) == (ip, port, offset)


def test_the_java_form_of_an_ipv4_id() -> None:
    # MessageDecoder.createMessageId: 7F000001 (127.0.0.1), 00002A9F (10911), then the offset
    assert parse_offset_msg_id("7F00000100002A9F0000000000000F4A") == ("127.0.0.1", 10911, 3914)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "32 or 56 hex digits"),
        ("ABC", "32 or 56 hex digits"),
        (uniq_key()[:-1], "32 or 56 hex digits"),
        ("Z" * 32, "not hexadecimal"),
        ("7F000001" + "FFFFFFFF" + "0" * 16, "negative"),
    ],
    # the ids name the case: uniq_key() differs per process (pytest-xdist workers must agree)
    ids=["empty", "short", "uniq-key-minus-one", "not-hex", "negative-port"],
)
def test_a_malformed_id_says_why(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_offset_msg_id(text)


def test_query_headers_travel_as_rocketmq_names_them() -> None:
    h = QueryMessageHeader("T", "k", 32, 0, 99)
    assert h.request().ext_fields == {
        "topic": "T",
        "key": "k",
        "maxNum": "32",
        "beginTimestamp": "0",
        "endTimestamp": "99",
    }
    assert h.request().code == RequestCode.QUERY_MESSAGE == 12
    assert ViewMessageHeader(7).request().ext_fields == {"offset": "7"}
    assert ViewMessageHeader(7).request().code == RequestCode.VIEW_MESSAGE_BY_ID == 33
    answer = QueryMessageResponseHeader(5, 6).to_ext_fields()
    assert answer == {"indexLastUpdateTimestamp": "5", "indexLastUpdatePhyoffset": "6"}
    with pytest.raises(BadRequest, match="maxNum"):
        QueryMessageHeader.from_command(
            RemotingCommand(code=12, ext_fields={"topic": "T", "key": "k"})
        )
