"""nameserver.startup: the data dir checks, the identity file, bind failures as one line."""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
from pathlib import Path

import pytest

from nameserver.startup import (
    IDENTITY_FILE,
    BindError,
    DataDirError,
    Identity,
    IdentityError,
    bind_problem,
    binding,
    claim_data_dir,
    prepare_data_dir,
    read_identity,
    write_identity,
)

CLUSTER = 0x1234_5678_9ABC_DEF0


# --------------------------------------------------------------------------- identity
def test_identity_round_trips_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    identity = Identity("n0", "123456789abcdef0", "metaledger", "metaledger 0.1.0")
    write_identity(str(tmp_path), identity)
    assert read_identity(str(tmp_path)) == identity
    assert sorted(os.listdir(tmp_path)) == [IDENTITY_FILE]
    assert json.loads((tmp_path / IDENTITY_FILE).read_text()) == {
        "format": 1,
        "node_id": "n0",
        "cluster_id": "123456789abcdef0",
        "cluster_token": "metaledger",
        "created_by": "metaledger 0.1.0",
    }


def test_a_data_dir_without_an_identity_reads_as_none(tmp_path: Path) -> None:
    assert read_identity(str(tmp_path)) is None


def test_first_start_records_the_node_and_the_cluster(tmp_path: Path) -> None:
    claimed = claim_data_dir(str(tmp_path), "n0", CLUSTER, "metaledger")
    assert claimed.node_id == "n0" and claimed.cluster_id == f"{CLUSTER:016x}"
    assert claimed.created_by.startswith("metaledger ")
    assert read_identity(str(tmp_path)) == claimed
    assert claim_data_dir(str(tmp_path), "n0", CLUSTER, "metaledger") == claimed  # later start


def test_another_node_id_is_refused_naming_both(tmp_path: Path) -> None:
    claim_data_dir(str(tmp_path), "n0", CLUSTER, "metaledger")
    with pytest.raises(IdentityError) as caught:
        claim_data_dir(str(tmp_path), "n9", CLUSTER, "metaledger")
    message = str(caught.value)
    assert "is node n0's, not n9's" in message and "--id n0" in message
    assert "\n" not in message


def test_another_cluster_is_refused_naming_both(tmp_path: Path) -> None:
    claim_data_dir(str(tmp_path), "n0", CLUSTER, "metaledger")
    with pytest.raises(IdentityError) as caught:
        claim_data_dir(str(tmp_path), "n0", CLUSTER + 1, "other")
    message = str(caught.value)
    assert f"belongs to cluster {CLUSTER:016x}" in message
    assert f"not to cluster {CLUSTER + 1:016x} ('other')" in message
    assert "--initial-cluster-token 'metaledger'" in message


def test_a_data_dir_with_data_but_no_identity_is_adopted_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "00000000000000000001.log").write_bytes(b"x")
    with caplog.at_level(logging.INFO, logger="nameserver.startup"):
        claimed = claim_data_dir(str(tmp_path), "n1", CLUSTER, "metaledger")
    assert claimed.node_id == "n1" and read_identity(str(tmp_path)) == claimed
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert "adopting it as node n1" in caplog.records[0].getMessage()


def test_an_empty_data_dir_is_claimed_without_a_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="nameserver.startup"):
        claim_data_dir(str(tmp_path), "n0", CLUSTER, "metaledger")
    assert caplog.records == []


@pytest.mark.parametrize("body", [b"{", b"[]", b'{"node_id": "n0"}', b"\xff"])
def test_a_damaged_identity_is_refused_naming_the_file(tmp_path: Path, body: bytes) -> None:
    (tmp_path / IDENTITY_FILE).write_bytes(body)
    with pytest.raises(IdentityError, match=f"{tmp_path / IDENTITY_FILE} is not a data dir"):
        claim_data_dir(str(tmp_path), "n0", CLUSTER, "metaledger")


def test_an_unreadable_identity_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / IDENTITY_FILE).mkdir()
    with pytest.raises(IdentityError, match=f"cannot read {tmp_path / IDENTITY_FILE}: is a dir"):
        read_identity(str(tmp_path))


# --------------------------------------------------------------------------- data dir
def test_prepare_creates_the_data_dir_and_its_parents(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b"
    prepare_data_dir(str(path))
    assert path.is_dir() and os.listdir(path) == []


def test_prepare_refuses_a_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("")
    with pytest.raises(DataDirError, match="it is a file, not a directory"):
        prepare_data_dir(str(path))


def test_prepare_refuses_a_path_below_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(DataDirError, match=f"cannot create it: {tmp_path / 'f'} is not a dir"):
        prepare_data_dir(str(tmp_path / "f" / "g" / "h"))


# --------------------------------------------------------------------------- addresses
def test_a_port_in_use_is_found_and_named() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        address = f"127.0.0.1:{s.getsockname()[1]}"
        assert bind_problem(address) == "address already in use"
    assert bind_problem(address) is None


def test_binding_turns_a_bind_failure_into_one_line() -> None:
    with pytest.raises(BindError) as caught, binding("listen_remoting", "127.0.0.1:1"):
        raise OSError(errno.EADDRINUSE, "error while attempting to bind on address: in use")
    assert str(caught.value) == (
        "cannot listen on 127.0.0.1:1 (--listen-remoting): address already in use"
    )


def test_binding_lets_other_errors_through() -> None:
    with pytest.raises(FileNotFoundError), binding("listen_peer", "127.0.0.1:1"):
        raise FileNotFoundError(errno.ENOENT, "no such file")
    with pytest.raises(RuntimeError, match="unrelated"), binding("listen_client", "127.0.0.1:1"):
        raise RuntimeError("unrelated")
