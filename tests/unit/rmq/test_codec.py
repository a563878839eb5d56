"""The sans-I/O remoting codec, headers and REGISTER_BROKER frames (research note §1)."""

from __future__ import annotations

import ast
import dataclasses
import json
import struct
import zlib
from pathlib import Path

import pytest

from nameserver.remoting.codes import NAMESERVER_REQUEST_CODES
from nameserver.remoting.headers import (
    HEADERS,
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    java_crc32,
    register_broker_request,
)
from rmq import codec
from rmq import codes as codes_module
from rmq.codec import (
    NEED_DATA,
    BadRequest,
    FrameDecoder,
    FrameTooLarge,
    MalformedFrame,
    RemotingCommand,
    decode_frame,
    dumps_fastjson,
    encode,
    loads_lenient,
    wants_standard_json,
)
from rmq.codes import LanguageCode, RequestCode, ResponseCode
from rmq.headers import GetRouteInfoHeader, RegisterBrokerHeader

# The header exactly as the research note (§1.1) shows Java's fastjson writing it.
GOLDEN_HEADER = (
    b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":7,'
    b'"serializeTypeCurrentRPC":"JSON","version":479}'
)


def json_frame(header: bytes | str, body: bytes = b"", serialize_type: int = 0) -> bytes:
    raw = header.encode() if isinstance(header, str) else header
    return (
        struct.pack(">ii", 4 + len(raw) + len(body), serialize_type << 24 | len(raw)) + raw + body
    )


def binary_frame(
    code: int,
    language: int,
    version: int,
    opaque: int,
    flag: int,
    remark: str,
    ext: dict[str, str],
    body: bytes = b"",
) -> bytes:
    """The "ROCKETMQ" header written independently of the decoder, from
    RocketMQSerializable.rocketMQProtocolEncode."""
    rb = remark.encode()
    eb = b"".join(
        struct.pack(">h", len(k.encode()))
        + k.encode()
        + struct.pack(">i", len(v.encode()))
        + v.encode()
        for k, v in ext.items()
    )
    header = (
        struct.pack(">hbhii", code, language, version, opaque, flag)
        + struct.pack(">i", len(rb))
        + rb
        + struct.pack(">i", len(eb))
        + eb
    )
    return json_frame(header, body, serialize_type=1)


def test_golden_bytes_of_a_route_request() -> None:
    command = RemotingCommand.request(105, {"topic": "T"}, opaque=7, language="JAVA", version=479)
    expected = struct.pack(">i", 4 + len(GOLDEN_HEADER)) + struct.pack(">i", len(GOLDEN_HEADER))
    assert encode(command) == expected + GOLDEN_HEADER
    assert FrameDecoder().feed(expected + GOLDEN_HEADER) == [command]


def test_round_trip_with_remark_body_and_unicode() -> None:
    command = RemotingCommand(
        code=17,
        language="CPP",
        version=63,
        opaque=-5,
        flag=1,
        remark="No topic route info in name server for the topic: Tö",
        ext_fields={"k": "värde", "n": "1"},
        body=b"\x00\xff binary",
    )
    assert FrameDecoder().feed(encode(command)) == [command]
    assert command.is_response and not command.is_oneway


def test_response_echoes_opaque_and_sets_the_response_bit() -> None:
    request = RemotingCommand.request(105, {"topic": "T"}, opaque=42, oneway=True)
    assert request.is_oneway and not request.is_response
    response = request.response(ResponseCode.TOPIC_NOT_EXIST, "no", {"changed": True})
    assert response.opaque == 42 and response.is_response and not response.is_oneway
    assert response.ext_fields == {"changed": "true"}


def test_partial_frames_across_feeds_and_several_in_one() -> None:
    a = RemotingCommand.request(105, {"topic": "A"}, opaque=1)
    b = RemotingCommand.request(106, opaque=2, body=b"x" * 1000)
    stream = encode(a) + encode(b)
    d = FrameDecoder()
    assert d.feed(stream[:3]) == []
    assert d.feed(stream[3:20]) == []
    assert d.next_event() is NEED_DATA
    assert d.feed(stream[20 : len(encode(a)) + 5]) == [a]
    assert d.feed(stream[len(encode(a)) + 5 :]) == [b]
    assert d.buffered_bytes == 0
    assert FrameDecoder().feed(stream) == [a, b]
    byte_by_byte = FrameDecoder()
    out = [c for i in range(len(stream)) for c in byte_by_byte.feed(stream[i : i + 1])]
    assert out == [a, b]


def test_oversize_frame_fails_on_its_length_field_alone() -> None:
    d = FrameDecoder()
    with pytest.raises(FrameTooLarge, match="16777220 bytes exceeds the 16777216-byte limit"):
        d.feed(struct.pack(">i", 16 * 1024 * 1024))
    # The decoder stays broken: nothing after a bad frame starts on a frame boundary.
    with pytest.raises(FrameTooLarge):
        d.feed(encode(RemotingCommand.request(105)))
    # Exactly at the limit is allowed (frame = 4 + length bytes).
    assert FrameDecoder().feed(struct.pack(">i", 16 * 1024 * 1024 - 4)) == []
    assert FrameDecoder(max_frame_bytes=100).feed(b"\x00\x00\x00\x60") == []  # 96 + 4
    with pytest.raises(FrameTooLarge, match="frame of 101 bytes exceeds the 100-byte limit"):
        FrameDecoder(max_frame_bytes=100).feed(b"\x00\x00\x00\x61")
    assert FrameTooLarge.closes_connection


def test_encode_refuses_what_no_peer_could_decode() -> None:
    with pytest.raises(ValueError, match="exceeds the 16777216-byte limit"):
        encode(RemotingCommand(code=0, body=b"x" * (16 * 1024 * 1024)))


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (struct.pack(">i", 2) + b"\x00\x00", "frame length 2 is less than 4"),
        (struct.pack(">i", -1), "frame length -1 is less than 4"),
        (struct.pack(">ii", 6, 10) + b"{}", "header length 10 exceeds the 2 bytes left"),
        (json_frame("{}", serialize_type=2), "unknown serialize type 2"),
        (json_frame('{"code":105'), "JSON header does not parse"),
        (json_frame(b"\xff\xfe"), "JSON header is not UTF-8"),
        (json_frame("[1]"), "JSON header must be an object, got list"),
        (json_frame('{"flag":0}'), "JSON header has no code"),
        (json_frame('{"code":"abc"}'), "field code must be an integer, got 'abc'"),
        (json_frame('{"code":1.5}'), "field code must be an integer, got 1.5"),
        (json_frame('{"code":true}'), "field code must be an integer, got True"),
        (json_frame('{"code":1,"opaque":4294967296}'), "opaque is out of the int32 range"),
        (json_frame('{"code":1,"extFields":[1]}'), "extFields must be an object"),
        (json_frame('{"code":1,"language":[]}'), "field language must be a string"),
    ],
)
def test_malformed_frames_name_what_is_wrong(frame: bytes, message: str) -> None:
    with pytest.raises(MalformedFrame, match=message.replace("[", r"\[").replace("(", r"\(")):
        FrameDecoder().feed(frame)


def test_lenient_header_and_ext_fields_as_real_clients_send_them() -> None:
    # C++ 1.x/2.x and ali-ons put numbers and booleans into extFields; fields may be absent.
    header = json.dumps(
        {
            "code": "310",
            "language": "CPP",
            "opaque": 3,
            "flag": 0,
            "version": 63,
            "extFields": {
                "defaultTopicQueueNums": 4,
                "queueId": 0,
                "k": False,
                "m": True,
                "g": 1795296830433,
                "f": 1.5,
                "skipped": None,
                "nested": {"a": 1},
            },
        }
    )
    (c,) = FrameDecoder().feed(json_frame(header, b"body"))
    assert c.code == 310 and c.language == "CPP" and c.body == b"body"
    assert c.ext_fields == {
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "k": "false",
        "m": "true",
        "g": "1795296830433",
        "f": "1.5",
        "nested": '{"a":1}',
    }
    assert c.ext_int("g") == 1795296830433
    assert c.ext_bool("k") is False and c.ext_bool("m") is True
    (minimal,) = FrameDecoder().feed(json_frame('{"code":106}'))
    assert minimal == RemotingCommand(code=106, version=0)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("false", False),
        ("0", False),
        (" False ", False),
    ],
)
def test_booleans_in_both_cpp_dialects(raw: str, expected: bool) -> None:
    assert RemotingCommand(code=1, ext_fields={"k": raw}).ext_bool("k") is expected


def test_bad_ext_fields_are_bad_requests_naming_the_field() -> None:
    c = RemotingCommand(code=1, ext_fields={"brokerId": "x", "compressed": "yes"})
    with pytest.raises(BadRequest, match=r"<brokerId> must be an integer, got 'x'"):
        c.ext_int("brokerId")
    with pytest.raises(BadRequest, match=r"<compressed> must be a boolean \(true/false/1/0\)"):
        c.ext_bool("compressed")
    with pytest.raises(BadRequest, match="the custom field <topic> is null"):
        c.ext_str("topic")
    assert c.ext_str("topic", "dflt") == "dflt" and c.ext_int("n", 0) == 0
    assert BadRequest.response_code == ResponseCode.SYSTEM_ERROR
    assert not BadRequest.closes_connection


def test_binary_rocketmq_header_is_decoded() -> None:
    frame = binary_frame(
        103, 0, 401, 99, 0, "hi", {"brokerName": "broker-a", "brokerId": "0"}, b"{}"
    )
    (c,) = FrameDecoder().feed(frame)
    assert c == RemotingCommand(
        code=103,
        language="JAVA",
        version=401,
        opaque=99,
        flag=0,
        remark="hi",
        ext_fields={"brokerName": "broker-a", "brokerId": "0"},
        body=b"{}",
    )
    (empty,) = FrameDecoder().feed(binary_frame(106, 1, 63, 1, 2, "", {}))
    assert empty.remark is None and empty.ext_fields == {} and empty.language == "CPP"
    assert empty.is_oneway


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (b"\x00\x69\x00", "binary header of 3 bytes is truncated"),
        (struct.pack(">hbhii", 1, 0, 0, 0, 0) + struct.pack(">i", 50), "remark length 50"),
        (
            struct.pack(">hbhii", 1, 0, 0, 0, 0) + struct.pack(">ii", 0, 0) + b"zz",
            "2 bytes after its extFields",
        ),
        (
            struct.pack(">hbhii", 1, 0, 0, 0, 0) + struct.pack(">ii", 0, 3) + b"\x00\x09a",
            "extFields key length 9 is out of bounds",
        ),
    ],
)
def test_malformed_binary_headers(header: bytes, message: str) -> None:
    with pytest.raises(MalformedFrame, match=message):
        decode_frame(struct.pack(">i", 1 << 24 | len(header)) + header)


def test_fastjson_integer_keys_unquoted_for_old_clients() -> None:
    route = {
        "brokerDatas": [{"brokerAddrs": {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}}],
        "name": "tö",
        "flag": False,
        "none": None,
    }
    assert (
        dumps_fastjson(route, standard=False)
        == (
            '{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"}}],'
            '"name":"tö","flag":false,"none":null}'
        ).encode()
    )
    assert dumps_fastjson(route, standard=True) == (
        b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911","1":"127.0.0.1:10921"}}],'
        b'"name":"t\\u00f6","flag":false,"none":null}'
    )
    expected = {
        "brokerDatas": [{"brokerAddrs": {"0": "127.0.0.1:10911", "1": "127.0.0.1:10921"}}],
        "name": "tö",
        "flag": False,
        "none": None,
    }
    assert loads_lenient(dumps_fastjson(route, standard=False)) == expected
    assert loads_lenient(dumps_fastjson(route, standard=True)) == expected


def test_loads_lenient_never_touches_string_contents() -> None:
    text = '{"a":"{1:2}, {3:4}","b\\"{5:":{ -7 :"x",8:[{9:"\\\\"}]}}'
    assert loads_lenient(text) == {"a": "{1:2}, {3:4}", 'b"{5:': {"-7": "x", "8": [{"9": "\\"}]}}


@pytest.mark.parametrize(
    ("version", "flag", "standard"),
    [
        (63, None, False),
        (121, None, False),
        (400, "false", False),
        (401, None, True),
        (63, "true", True),
    ],
)
def test_route_dialect_follows_version_and_accept_standard_json_only(
    version: int, flag: str | None, standard: bool
) -> None:
    ext = {} if flag is None else {"acceptStandardJsonOnly": flag}
    command = RemotingCommand(code=105, version=version, ext_fields=ext)
    assert wants_standard_json(command) is standard


def test_codes_have_rocketmq_values() -> None:
    assert sorted(NAMESERVER_REQUEST_CODES) == [
        100, 101, 102, 103, 104, 105, 106, 205, 206, 216, 217, 219, 224, 304, 322, 327, 901, 904
    ]  # fmt: skip
    assert (ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR) == (0, 1)
    assert ResponseCode.REQUEST_CODE_NOT_SUPPORTED == 3
    assert (ResponseCode.TOPIC_NOT_EXIST, ResponseCode.QUERY_NOT_FOUND) == (17, 22)
    assert LanguageCode.CPP == 1 and LanguageCode.NODE_JS == 13
    assert [lang.name for lang in LanguageCode] == codec._LANGUAGES


def test_codec_modules_are_sans_io() -> None:
    """STYLE.md 1 and DESIGN.md §2: brokers and replicators share the codec, so it imports
    no sockets, no asyncio and nothing of metaledger."""
    for path in (codec.__file__, codes_module.__file__):
        # the source beside a mypyc build's .so (codec.cpython-311-...so -> codec.py)
        source = Path(path).with_name(Path(path).name.split(".")[0] + ".py")
        tree = ast.parse(source.read_text())
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        } | {
            (node.module or "").split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
        }
        assert not imported & {"socket", "asyncio", "selectors", "nameserver", "raftlog", "grpc"}


def test_route_header_parses_and_writes() -> None:
    c = RemotingCommand(code=105, ext_fields={"topic": "T", "acceptStandardJsonOnly": "1"})
    assert GetRouteInfoHeader.from_command(c) == GetRouteInfoHeader("T", True)
    assert GetRouteInfoHeader("T").to_ext_fields() == {"topic": "T"}
    with pytest.raises(BadRequest, match="the custom field <topic> is null"):
        GetRouteInfoHeader.from_command(RemotingCommand(code=105))
    assert set(HEADERS) <= set(RequestCode)


def test_register_broker_request_as_a_broker_sends_it() -> None:
    header = RegisterBrokerHeader(
        broker_name="broker-a",
        broker_addr="127.0.0.1:10911",
        cluster_name="DefaultCluster",
        ha_server_addr="127.0.0.1:10912",
        broker_id=0,
        heartbeat_timeout_millis=30000,
        zone_name="z1",
    )
    body = RegisterBrokerBody(
        topics=(TopicConfig("TopicA", 8, 8), TopicConfig("TopicB", perm=4, order=True)),
        data_version=DataVersion(counter=3, timestamp=1700000000000),
    )
    request = register_broker_request(header, body, opaque=11)
    assert request.code == RequestCode.REGISTER_BROKER and request.opaque == 11
    assert request.body.startswith(
        b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":'
        b'{"counter":3,"stateVersion":0,"timestamp":1700000000000},"topicConfigTable":'
        b'{"TopicA":{"attributes":{},"order":false,"perm":6,"readQueueNums":8,'
        b'"topicFilterType":"SINGLE_TAG","topicName":"TopicA","topicSysFlag":0,'
        b'"writeQueueNums":8},'
    )
    assert request.ext_fields == {
        "brokerName": "broker-a",
        "brokerAddr": "127.0.0.1:10911",
        "clusterName": "DefaultCluster",
        "haServerAddr": "127.0.0.1:10912",
        "brokerId": "0",
        "heartbeatTimeoutMillis": "30000",
        "compressed": "false",
        "bodyCrc32": str(zlib.crc32(request.body) & 0x7FFFFFFF),
        "zoneName": "z1",
    }
    # What the nameserver will do with the frame: decode, check the CRC, parse both parts.
    (decoded,) = FrameDecoder().feed(encode(request))
    parsed = RegisterBrokerHeader.from_command(decoded)
    assert parsed == dataclasses.replace(header, body_crc32=parsed.body_crc32)
    assert parsed.body_crc32 == java_crc32(decoded.body)
    assert RegisterBrokerBody.decode(decoded.body) == body


def test_register_broker_header_errors_name_the_field() -> None:
    ext = {"brokerName": "b", "brokerAddr": "a", "clusterName": "c", "haServerAddr": "h"}
    with pytest.raises(BadRequest, match="the custom field <brokerId> is null"):
        RegisterBrokerHeader.from_command(RemotingCommand(code=103, ext_fields=ext))
    with pytest.raises(BadRequest, match="<brokerId> must be an integer"):
        RegisterBrokerHeader.from_command(
            RemotingCommand(code=103, ext_fields={**ext, "brokerId": "one"})
        )
    with pytest.raises(BadRequest, match="body is not JSON"):
        RegisterBrokerBody.decode(b"\x78\x9c not json")
    with pytest.raises(BadRequest, match="readQueueNums must be an integer"):
        RegisterBrokerBody.decode(b'{"topicConfigTable":{"T":{"readQueueNums":"x"}}}')


def test_register_broker_body_from_an_old_broker_and_fastjson_keys() -> None:
    # Brokers older than V3_0_11 send a bare TopicConfigSerializeWrapper.
    old = b'{"dataVersion":{"counter":1,"timestamp":5},"topicConfigTable":{"T":{"topicName":"T"}}}'
    body = RegisterBrokerBody.decode(old)
    assert body.topics == (TopicConfig("T"),)
    assert body.data_version == DataVersion(counter=1, timestamp=5)


def test_send_v2_header_reads_short_names_and_a_mix_alike() -> None:
    """SEND_MESSAGE_V2's short names are read as they are; a request that mixes in a long
    name is renamed first, as before: both give the same header."""
    from rmq.headers import V2_FIELDS, SendMessageHeader

    h = SendMessageHeader(
        producer_group="g",
        topic="T",
        queue_id=3,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        flag=7,
        properties="KEYS\x01k\x02",
        max_reconsume_times=16,
        batch=False,
    )
    request = decode_frame(encode(h.request_v2(b"body"))[4:])
    assert request.ext_fields.keys() <= V2_FIELDS.keys()
    assert SendMessageHeader.from_command(request) == h
    mixed = dict(request.ext_fields)
    mixed["topic"] = mixed.pop("b")
    assert SendMessageHeader.from_command(request.replace(ext_fields=mixed)) == h
    mixed["e"] = " +3"  # not plain digits: the lenient parse, as before
    assert SendMessageHeader.from_command(request.replace(ext_fields=mixed)) == h
    del mixed["a"]
    with pytest.raises(BadRequest, match="producerGroup"):
        SendMessageHeader.from_command(request.replace(ext_fields=mixed))
