"""A node's start-up checks: its data dir, the identity recorded in it, its listening addresses.

Each failure is a :class:`StartupError` whose message is one line for the operator, naming
the path or address, the flag that gave it and what to do; ``metaledger serve`` prints it
without a traceback.

    StartupError            the node cannot start
    ├── DataDirError        the data dir cannot be created, is a file, or is not writable
    ├── IdentityError       the data dir is another node's, or another cluster's
    └── BindError           an address cannot be listened on (in use, not this machine's)

A data dir records whose it is on first start, in ``DATA/identity.json`` (written
atomically: temporary file, fsync, rename, fsync of the directory)::

    {"format": 1, "node_id": "n0", "cluster_id": "6b86b273ff34fce1",
     "cluster_token": "metaledger", "created_by": "metaledger 0.1.0"}

Every later start compares the node id and the cluster id (derived from
``--initial-cluster-token``) with it. A data dir that holds data but no identity file (made
before the file existed, or seeded by ``snapshot restore``) is adopted: the file is written
from the node's flags and a line is logged.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from importlib import metadata

from nameserver import defaults
from snapshots import makedirs_durable

log = logging.getLogger(__name__)

IDENTITY_FILE = "identity.json"
IDENTITY_FORMAT = 1
#: subdirectories that hold a node's data (a data dir with any of them, non-empty, has data)
DATA_SUBDIRS = ("log", "raft", "snap")

#: the ``serve`` flag of each configuration field named in a message
FLAGS = {
    "data_dir": "--data-dir",
    "node_id": "--id",
    "cluster_token": "--initial-cluster-token",
    "listen_client": "--listen-client",
    "listen_peer": "--listen-peer",
    "listen_remoting": "--listen-remoting",
    "listen_metrics": "--listen-metrics",
}


class StartupError(Exception):
    """The node cannot start; the message is one line that says why and names the flag."""


class DataDirError(StartupError):
    """The data dir cannot be created, is not a directory, or cannot be written."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"cannot use data dir {path} ({FLAGS['data_dir']}): {why}")
        self.path = path


class IdentityError(StartupError):
    """The data dir belongs to another node, or another cluster (or its record is damaged)."""


class BindError(StartupError):
    """An address cannot be listened on."""

    def __init__(self, field: str, address: str, why: str) -> None:
        super().__init__(f"cannot listen on {address} ({FLAGS.get(field, field)}): {why}")
        self.field = field
        self.address = address


# --------------------------------------------------------------------------- data dir
def _why(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def prepare_data_dir(path: str) -> None:
    """Create ``path`` (and its parents) if needed; raise :class:`DataDirError` when it is
    not a directory, cannot be created or cannot be written."""
    if os.path.lexists(path) and not os.path.isdir(path):
        raise DataDirError(path, "it is a file, not a directory")
    try:
        makedirs_durable(path)
    except (FileExistsError, NotADirectoryError):
        parent = _first_non_directory(path)
        raise DataDirError(path, f"cannot create it: {parent} is not a directory") from None
    except OSError as exc:
        raise DataDirError(path, f"cannot create it: {_why(exc)}") from None
    probe = os.path.join(path, f".write-test-{os.getpid()}")
    try:
        with open(probe, "wb"):
            pass
        os.unlink(probe)
    except OSError as exc:
        raise DataDirError(path, f"cannot write in it: {_why(exc)}") from None


def _first_non_directory(path: str) -> str:
    """The first existing component of ``path`` that is not a directory (or ``path``)."""
    current = ""
    for part in os.path.abspath(path).split(os.sep)[1:]:
        current = current + os.sep + part
        if os.path.lexists(current) and not os.path.isdir(current):
            return current
    return path


def has_data(path: str) -> bool:
    """True if the data dir holds a node's data (a log, a journal or a snapshot)."""
    for sub in DATA_SUBDIRS:
        with contextlib.suppress(OSError):
            if any(os.scandir(os.path.join(path, sub))):
                return True
    return False


# --------------------------------------------------------------------------- identity
@dataclass(frozen=True)
class Identity:
    """Whose data a data dir holds (``DATA/identity.json``)."""

    node_id: str
    cluster_id: str  # 16 hex digits
    cluster_token: str
    created_by: str = ""
    format: int = IDENTITY_FORMAT


def version() -> str:
    """``metaledger <version>`` of the installed distribution (or of this tree)."""
    try:
        return "metaledger " + metadata.version("metaledger")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a checkout
        return "metaledger (not installed)"


def read_identity(data_dir: str) -> Identity | None:
    """The identity a data dir records, None if it records none; :class:`IdentityError`
    if the file cannot be read or is not an identity."""
    path = os.path.join(data_dir, IDENTITY_FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read(64 * 1024)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise IdentityError(f"cannot read {path}: {_why(exc)}") from None
    try:
        doc = json.loads(raw)
        return Identity(
            node_id=str(doc["node_id"]),
            cluster_id=str(doc["cluster_id"]),
            cluster_token=str(doc["cluster_token"]),
            created_by=str(doc.get("created_by", "")),
            format=int(doc.get("format", IDENTITY_FORMAT)),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise IdentityError(
            f"{path} is not a data dir identity ({type(exc).__name__}: {exc}); restore it, "
            "or remove it to adopt the data dir as this node's"
        ) from None


def write_identity(data_dir: str, identity: Identity) -> None:
    """Write ``DATA/identity.json`` atomically (a crash leaves the old file or the new one)."""
    path = os.path.join(data_dir, IDENTITY_FILE)
    tmp = path + ".tmp"
    body = json.dumps(asdict(identity), indent=1, sort_keys=True).encode() + b"\n"
    with open(tmp, "wb") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def claim_data_dir(data_dir: str, node_id: str, cluster_id: int, cluster_token: str) -> Identity:
    """Check that ``data_dir`` is node ``node_id``'s of cluster ``cluster_id``; record it on
    first start (or adopt a data dir that has data but no record). Raises
    :class:`IdentityError` naming both ids and how to proceed."""
    want = Identity(node_id, f"{cluster_id:016x}", cluster_token, version())
    have = read_identity(data_dir)
    if have is None:
        if has_data(data_dir):
            log.info(
                "data dir %s has data but no %s (seeded by snapshot restore, or made by an "
                "older version): adopting it as node %s of cluster %s",
                data_dir,
                IDENTITY_FILE,
                node_id,
                want.cluster_id,
            )
        write_identity(data_dir, want)
        return want
    if have.node_id != node_id:
        raise IdentityError(
            f"data dir {data_dir} ({FLAGS['data_dir']}) is node {have.node_id}'s, not "
            f"{node_id}'s: start it with {FLAGS['node_id']} {have.node_id}, or give node "
            f"{node_id} its own data dir (a new, empty one to join as a new member)"
        )
    if have.cluster_id != want.cluster_id:
        raise IdentityError(
            f"data dir {data_dir} ({FLAGS['data_dir']}) belongs to cluster {have.cluster_id} "
            f"({FLAGS['cluster_token']} {have.cluster_token!r}), not to cluster "
            f"{want.cluster_id} ({cluster_token!r}): give the token it was made with, or a "
            "new data dir"
        )
    return have


def warn_default_token(cluster_token: str) -> None:
    """One WARNING when a node runs with the default ``--initial-cluster-token``: every cluster
    left at it has the same cluster id, so a snapshot of one seeds another without a word.
    Logged once the node serves (a refused start stays one line)."""
    if cluster_token == defaults.CLUSTER_TOKEN:
        log.warning(
            "%s is the default (%s): every cluster left at it has the same cluster id, so a "
            "snapshot of one restores into another without a word; give each cluster its own "
            "token (`cluster up` makes one)",
            FLAGS["cluster_token"],
            defaults.CLUSTER_TOKEN,
        )


# --------------------------------------------------------------------------- addresses
_BIND_ERRNOS = {errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES, errno.EPERM}


def bind_problem(address: str) -> str | None:
    """Why ``host:port`` cannot be listened on now, found by binding a socket to it as a
    server does (``SO_REUSEADDR``); None if it can be."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (OSError, ValueError) as exc:
        return f"cannot resolve {host!r}: {exc}"
    problems: list[OSError] = []
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(sockaddr)
            except OSError as exc:
                problems.append(exc)
    in_use = [p for p in problems if p.errno == errno.EADDRINUSE]
    if in_use or (problems and len(problems) == len(infos)):
        return _why((in_use or problems)[0])
    return None  # some address of a name may not be this machine's (``localhost``'s ::1)


def check_bindable(field: str, address: str) -> None:
    """Raise :class:`BindError` if ``address`` cannot be listened on now: before handing
    it to a server that would only log the reason (the gRPC core)."""
    why = bind_problem(address)
    if why is not None:
        raise BindError(field, address, why)


@contextlib.contextmanager
def binding(field: str, address: str) -> Iterator[None]:
    """Turn a failure to listen on ``address`` (configuration field ``field``) inside the
    block into a :class:`BindError`: an OSError with a bind errno, or gRPC's RuntimeError
    ("Failed to bind")."""
    try:
        yield
    except OSError as exc:
        in_use = exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL)
        if not in_use and not (exc.errno in _BIND_ERRNOS and "bind" in str(exc).lower()):
            raise
        raise BindError(field, address, os.strerror(exc.errno or 0).lower()) from exc
    except RuntimeError as exc:
        if "bind" not in str(exc).lower():
            raise
        why = bind_problem(address) or "the address is in use or not available"
        raise BindError(field, address, why) from exc
