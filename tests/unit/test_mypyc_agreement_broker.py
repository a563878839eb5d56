"""The mypyc build of the broker's modules agrees with their Python source.

The broker's half of :mod:`tests.unit.test_mypyc_agreement` (same helpers, same rule: what
``import`` gives and the ``.py`` loaded beside it get the same generated inputs and must give
the same outputs and errors): the send processor (the stored message built from a send's
header, DELAY parking, the answer's bytes, the bornHost, the half-message and replica checks,
batch bodies) and the index file (the bytes of two files fed the same puts, and their
lookups).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bench.mypyc_bench import both
from broker.config import BrokerConfig
from broker.core import BrokerCore
from broker.replication import PutStatus
from broker.store import PutResult
from rmq.batch import BatchItem, encode_batch
from rmq.codec import RemotingCommand, encode
from rmq.headers import SendMessageHeader
from rmq.message import Host
from rmq.message import encode as encode_record
from rmq.server import Peer
from tests.unit.test_mypyc_agreement import SETTINGS, agree, outcome, plain

PROCESSOR = "broker.send.processor"
INDEX = "broker.store.index_file"

texts = st.text(st.sampled_from("ab%RETRY%DLQ-_ 0123:,.true"), max_size=12)
props = st.dictionaries(
    st.sampled_from(["TRAN_MSG", "DELAY", "REPLICATOR_SOURCE", "KEYS", "TAGS"]),
    st.one_of(texts, st.sampled_from(["true", "TRUE", "3", "-2", " 7", "0", "99"])),
    max_size=4,
)


def _processors() -> list[Any]:
    core = object.__new__(BrokerCore)  # only its config is read by what is compared here
    core.config = BrokerConfig(broker_name="b", data_dir="/nonexistent", listen_port=10911)
    return [m.SendProcessor(core) for m in both(PROCESSOR)]


@SETTINGS
@given(
    p=props,
    sys_flag=st.integers(0, 2**31 - 1),
    reconsume=st.integers(-3, 20),
    topic=texts,
    cluster=texts,
    address=st.sampled_from(["10.0.0.7:4100", "::1:9", "localhost:80", "x", "1.2.3.4:"]),
    body=st.binary(max_size=60),
)
def test_processor_checks(
    p: dict[str, str],
    sys_flag: int,
    reconsume: int,
    topic: str,
    cluster: str,
    address: str,
    body: bytes,
) -> None:
    agree(PROCESSOR, "is_half_message", sys_flag, reconsume, p)
    agree(PROCESSOR, "check_replica", topic, cluster, p)
    agree(PROCESSOR, "peer_host", Peer(1, address))
    agree(PROCESSOR, "_batch", body)
    items = [BatchItem(sys_flag & 7, body, p), BatchItem(0, b"", {})]
    agree(PROCESSOR, "_batch", encode_batch(items))


@SETTINGS
@given(
    p=props,
    topic=texts,
    queue_id=st.integers(0, 15),
    flag=st.integers(-(2**31), 2**31 - 1),
    sys_flag=st.integers(0, 2**31 - 1),
    batch=st.booleans(),
    born=st.integers(0, 2**63 - 1),
    reconsume=st.integers(0, 30),
    status=st.sampled_from(list(PutStatus)),
    offsets=st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**40)), max_size=3),
    opaque=st.integers(0, 2**31 - 1),
)
def test_processor_messages_and_answers(
    p: dict[str, str],
    topic: str,
    queue_id: int,
    flag: int,
    sys_flag: int,
    batch: bool,
    born: int,
    reconsume: int,
    status: PutStatus,
    offsets: list[tuple[int, int]],
    opaque: int,
) -> None:
    h = SendMessageHeader(
        producer_group="g",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=sys_flag,
        born_timestamp=born,
        flag=flag,
        reconsume_times=reconsume,
        batch=batch,
    )
    host = Host("10.1.2.3", 4321)
    request = RemotingCommand(310, opaque=opaque, ext_fields={"a": "g"})
    results = [PutResult("PUT_OK", phy, q, 100) for phy, q in offsets]
    got = []
    for proc in _processors():
        message = proc._message(h, topic, queue_id, b"body", flag, p, host)
        parked = proc.delayed(message)
        answer = proc._answer(request, status, results, queue_id)
        got.append((plain(message), encode_record(parked), encode(answer)))
    assert got[0] == got[1]


@SETTINGS
@given(
    puts=st.lists(
        st.tuples(
            st.lists(st.integers(0, 2**31 - 1), max_size=4),
            st.integers(0, 2**40),
            st.integers(0, 2**42),
        ),
        max_size=30,
    ),
    keys=st.lists(texts, max_size=4),
    window=st.tuples(st.integers(0, 2**42), st.integers(0, 2**42)),
    max_num=st.integers(0, 40),
)
def test_index_file_bytes_and_lookups(
    tmp_path_factory: Any,
    puts: list[tuple[list[int], int, int]],
    keys: list[str],
    window: tuple[int, int],
    max_num: int,
) -> None:
    got = []
    for m in both(INDEX):
        hashes = [m.key_hash(k) for k in keys]
        path = Path(tmp_path_factory.mktemp("index")) / "f"
        f = m.IndexFile(str(path), 7, 24)
        trace: list[Any] = [hashes]
        for hs, phy, ts in puts:
            trace.append(f.put(hs + hashes, phy, ts))
            f.seen(phy)
        f.write_header()
        trace.append((f.full, f.time_matched(*window)))
        for h in {h for hs, _, _ in puts for h in hs} | set(hashes):
            out: list[int] = []
            f.lookup(h, window[0], window[1], out, max_num)
            f.lookup(h, 0, 2**42, out, max_num + 5)
            trace.append(out)
        f.cut(len(puts))
        f.write_header()
        f.flush()
        f.close()
        trace.append(path.read_bytes())
        got.append(trace)
    assert got[0] == got[1]


@SETTINGS
@given(
    records=st.lists(
        st.tuples(
            st.integers(0, 2**40),
            st.sampled_from(["T", "Ü"]),
            st.lists(st.sampled_from(["a", "b", ""]), max_size=3).map(" ".join),
            st.sampled_from(["", "U1", "U2"]),
            st.integers(0, 2**42),
        ),
        max_size=12,
    ),
    entries=st.integers(2, 9),
)
def test_index_file_put_records(
    tmp_path_factory: Any, records: list[tuple[int, str, str, str, int]], entries: int
) -> None:
    """A batch of records into a file that may fill (inside a record too), then the rest
    into the next: the same returns and the same bytes."""
    got = []
    for m in both(INDEX):
        trace: list[Any] = [[m.record_hashes(t, k, u) for _o, t, k, u, _s in records]]
        files = []
        done, rest = 0, []
        while True:
            path = Path(tmp_path_factory.mktemp("index")) / "f"
            f = m.IndexFile(str(path), 3, entries)
            done, rest = f.put_records(records, done, rest)
            f.write_header()
            f.flush()
            f.close()
            trace.append((done, rest))
            files.append(path.read_bytes())
            if done >= len(records):
                break
        got.append((trace, files))
    assert got[0] == got[1]


def _master_log(tmp: Path, count: int, segment_size: int) -> bytes:
    """A master's commit log of ``count`` messages over three queues (keys, tags, a blank at
    each segment's end)."""
    from broker.store import MessageStore, StoreConfig
    from rmq.message import StoredMessage

    store = MessageStore(str(tmp), StoreConfig(segment_size=segment_size))
    try:
        for i in range(count):
            props = {"KEYS": f"k{i % 3}", "UNIQ_KEY": f"u{i}", "TAGS": "ab"[i % 2]}
            m = StoredMessage("TQ"[i % 2], b"x" * (i % 40), queue_id=i % 3, properties=props,
                              store_timestamp=1_700_000_000_000 + i)  # fmt: skip
            store.put_many([[m]], wait_durable=False)
        return store.read_log(0, store.log.end_offset)
    finally:
        store.close()


@SETTINGS
@given(
    count=st.integers(1, 30),
    start=st.integers(0, 10**5),
    cut=st.integers(0, 10**5),
    flip=st.none() | st.tuples(st.integers(0, 10**5), st.integers(0, 7)),
    keep_index=st.booleans(),
)
def test_replicated_scan(
    tmp_path_factory: Any,
    count: int,
    start: int,
    cut: int,
    flip: tuple[int, int] | None,
    keep_index: bool,
) -> None:
    """A replica's scan of the master's bytes from any point to any end, a flipped bit
    included: the same stop, need, refusal, units, index records and queue writes."""
    data = bytearray(_master_log(Path(tmp_path_factory.mktemp("log")), count, 1024))
    if flip is not None:
        data[flip[0] % len(data)] ^= 1 << flip[1]
    end = cut % (len(data) + 1)
    p = min(start % (len(data) + 1), end)
    traces = []
    for m in both("broker.store.replicated"):
        writes: list[Any] = []
        units: dict[Any, Any] = {}
        indexed: list[Any] = []
        got = outcome(
            m.scan_replicated,
            lambda at, n: bytes(data[at : at + n]),
            p,
            end,
            1024,
            keep_index,
            units,
            indexed,
            lambda *a, w=writes: w.append(a),
        )
        traces.append((got, units, indexed, writes))
    assert traces[0] == traces[1]
    if p == 0 and flip is None and end == len(data):  # the whole log: every record scanned
        assert traces[0][0] == ("ok", (end, 0, None))
