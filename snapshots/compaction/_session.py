"""The Spark side of the compaction's driver: a SparkContext (the JVM session) with the
settings this project needs, the driver JVM's class-data-sharing archive, and the code
shipped to remote executors.

Spark settings (each one measured or observed to matter on a small machine): loopback bind
(SPARK_LOCAL_IP, driver host and bind address) for local and loopback masters, UI off, the Python
workers run :func:`worker_python` (``sys.executable`` on local and loopback masters, so a
virtualenv's packages reach them),
``spark.local.dir`` and ``java.io.tmpdir`` in a temp folder, a log4j2 file at ERROR (WARN on
request) and, unless verbose, the JVM's stdout/stderr sent to a log file (the only way to
drop ``WARNING: Using incubator modules``), the pandas-3 FutureWarning filtered, C1 JIT +
serial GC by default (``fast_jvm``: the JVM only moves pickled bytes here, so the default
JIT bought nothing: 1e7 took 84 CPU-s with C1, 102 with the full JIT). The start: a bare
SparkContext (no SparkSession), and the driver JVM's class-data-sharing archive (recorded
once, in the user cache, by the first run's JVM as it exits; make_spark_context): to a
ready context 4.0-7.1 s / 4.7-5.4 CPU-s with a SparkSession, 2.4-3.3 s / 2.8-3.0 CPU-s
with a bare context, 1.2-1.3 s / 1.5-1.6 CPU-s with the archive (load1 ~3); the recording
run costs ~10 s more once.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import uuid
import warnings
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from snapshots.compaction._errors import CompactionError

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_MASTER",
    "default_class_archive_dir",
    "finish_class_archive",
    "make_spark_context",
    "make_spark_session",
    "parse_memory_size",
    "worker_python",
]

DEFAULT_MASTER: Final = "local[*]"

_SIZE_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_FAST_JVM_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData"
_LOG4J_TEMPLATE = """\
rootLogger.level = {level}
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss.SSS}} %p %c{{1}}: %m%n%ex
logger.spark.name = org.apache.spark
logger.spark.level = {level}
logger.sparkproject.name = org.sparkproject
logger.sparkproject.level = {level}
"""


def parse_memory_size(text: str) -> int:
    """Bytes in a JVM-style size (``512m``, ``2g``, ``300k``, ``1048576``; ``mb``/``gb``
    spellings too), as Spark's memory settings take it. Raises ValueError naming the text."""
    m = re.fullmatch(r"\s*(\d+)\s*([bkmgt]?)b?\s*", text.lower())
    if m is None or int(m.group(1)) <= 0:
        raise ValueError(
            f"memory size {text!r}: expected a positive number with an optional unit "
            "k, m, g or t (e.g. 512m)"
        )
    return int(m.group(1)) * _SIZE_UNITS[m.group(2)]


def worker_python(master: str, conf: Mapping[str, str] | None = None) -> str | None:
    """The Python interpreter the job's Python workers run, or None for Spark's default
    (``python3`` on the executors' PATH): ``spark.pyspark.python`` in `conf`, else
    ``$PYSPARK_PYTHON``, else this process's own interpreter (``sys.executable``) when the
    master is local or on loopback: the workers run on this machine, so the packages of a
    virtualenv that runs the driver reach them. A cluster elsewhere has no such path: its
    workers run ``python3`` unless told.

    A SparkContext made in this process reads its workers' interpreter from
    ``$PYSPARK_PYTHON`` alone (``spark.pyspark.python`` is spark-submit's and never reaches
    them), so :func:`make_spark_context` hands the answer over in the environment."""
    explicit = (conf or {}).get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
    if explicit:
        return explicit
    return sys.executable if _is_loopback(master) else None


@contextlib.contextmanager
def _environ(name: str, value: str | None) -> Iterator[None]:
    """`name` set to `value` in os.environ while open (left alone for None), then restored."""
    if value is None:
        yield
        return
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _is_loopback(master: str) -> bool:
    if master.startswith("local"):
        return True
    if master.startswith("spark://"):
        hosts = [h.rsplit(":", 1)[0] for h in master[len("spark://") :].split(",")]
        return all(h in _LOOPBACK_HOSTS for h in hosts)
    return False


@contextlib.contextmanager
def _child_output_to(path: Path) -> Iterator[None]:
    """While open, fds 1 and 2 point at `path`, so a child started now (the JVM, and the
    Python workers it forks) writes there for good; ours are restored afterwards."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, target):
            os.close(fd)


def make_spark_context(
    master: str = DEFAULT_MASTER,
    *,
    work_dir: str | os.PathLike[str],
    app_name: str = "metaledger-compact",
    log_level: str = "ERROR",
    fast_jvm: bool = True,
    driver_memory: str | None = None,
    executor_memory: str | None = None,
    conf: Mapping[str, str] | None = None,
    ship_code: bool | None = None,
    class_archive_dir: str | os.PathLike[str] | None = None,
) -> SparkContext:
    """A SparkContext with the settings this project needs (see the module docstring): what
    the job runs on, since it uses RDDs only. No SparkSession: its SQL session state cost
    ~2 CPU-s more at every start (measured: 4.9 against 2.9 CPU-s to a ready context).

    `work_dir` holds Spark's local and temp dirs, the log4j file and, when `log_level` is
    ERROR, the JVM's own output (``<work_dir>/spark.log``); the caller removes it after
    ``stop()``. JVM options (`fast_jvm`, `driver_memory`, the log4j file) only take effect
    when this process starts its JVM: a later context in the same process reuses the first
    JVM (PySpark never stops it). The Python workers run :func:`worker_python` (from
    ``spark.pyspark.python`` in `conf`, ``$PYSPARK_PYTHON``, or this interpreter on a local
    or loopback master). `ship_code` (default: for non-local masters) sends the
    ``snapshots`` and ``protos`` packages to the executors with addPyFile, so they need no
    metaledger install; their Python must still have protobuf and crc32c.

    `class_archive_dir`: where the driver JVM's class-data-sharing archive lives (see
    :func:`_class_archive`): used when present, else recorded by this JVM for the next one
    (finished by :func:`finish_class_archive` after ``stop()``). Raises CompactionError
    when the JVM does not start (after one retry without the archive, if it had one).
    """
    from pyspark import SparkConf, SparkContext

    global _pending_archive
    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas.*")
    level = log_level.upper()
    work = Path(work_dir)
    local_dir = work / "local"
    tmp_dir = work / "tmp"
    for d in (local_dir, tmp_dir):
        d.mkdir(parents=True, exist_ok=True)
    log4j = work / "log4j2.properties"
    log4j.write_text(_LOG4J_TEMPLATE.format(level=level.lower()))
    # A JVM that dies (e.g. on a damaged class archive) writes its crash report into the
    # work dir, not into the caller's current directory.
    java_opts = (
        f"-Djava.io.tmpdir={tmp_dir} -Dlog4j.configurationFile=file:{log4j} "
        f"-XX:ErrorFile={work}/hs_err_pid%p.log"
    )
    if fast_jvm:
        java_opts = f"{_FAST_JVM_FLAGS} {java_opts}"
    loopback = _is_loopback(master)
    if loopback:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.pyspark.driver.python": sys.executable,
        "spark.local.dir": str(local_dir),
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.python.worker.reuse": "true",
    }
    if loopback:
        settings["spark.driver.host"] = settings["spark.driver.bindAddress"] = "127.0.0.1"
    if driver_memory:
        settings["spark.driver.memory"] = driver_memory
    if executor_memory:
        settings["spark.executor.memory"] = executor_memory
    python = worker_python(master, conf)
    if python is not None:
        settings["spark.pyspark.python"] = python
    settings.update(conf or {})
    quiet = level in ("ERROR", "FATAL", "OFF")
    starting_jvm = SparkContext._gateway is None
    archive = None
    if class_archive_dir is not None and starting_jvm:
        with contextlib.suppress(OSError):  # no cache directory: start as without one
            archive = _class_archive(Path(class_archive_dir), java_opts if fast_jvm else "")
    for attempt in (archive, None) if archive is not None else (None,):
        spark_conf = SparkConf()
        for k, v in settings.items():
            spark_conf.set(k, v)
        if attempt is not None:
            flag = _class_archive_flag(attempt)
            driver_opts = settings["spark.driver.extraJavaOptions"]
            spark_conf.set("spark.driver.extraJavaOptions", f"{flag} {driver_opts}")
        redirect = _child_output_to(work / "spark.log") if quiet and starting_jvm else None
        try:
            with redirect or contextlib.nullcontext(), _environ("PYSPARK_PYTHON", python):
                sc = SparkContext.getOrCreate(spark_conf)
            break
        except Exception as e:
            _pending_archive = None
            if attempt is not None and attempt.exists():
                # A damaged archive crashes the JVM at start: drop it, start without.
                attempt.unlink(missing_ok=True)
                continue
            tail = ""
            log_file = work / "spark.log"
            if log_file.exists():
                tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-20:])
            raise CompactionError(f"Spark did not start ({master}): {e}\n{tail}".rstrip()) from e
    sc.setLogLevel(level)
    if ship_code if ship_code is not None else not master.startswith("local"):
        sc.addPyFile(str(_code_zip(work)))
    return sc


#: (temp file the JVM dumps its class archive into at exit, the archive's final path)
_pending_archive: tuple[Path, Path] | None = None


def _class_archive(directory: Path, flags: str) -> Path:
    """The class-data-sharing archive for this JVM, pyspark and flags in `directory`.

    A JDK 13+ dynamic CDS archive holds the classes the driver JVM loaded (Spark's, ~70 MB):
    mapped instead of parsed and verified, it cut the start to a ready context from ~3.5 to
    ~1.9 CPU-s on this box. The name hashes what the archive depends on (the java binary,
    pyspark's version and jars, the JIT/GC flags), so a changed install makes a new one; a
    stale archive that still matches is refused by the JVM with a warning, not an error.
    """
    import hashlib

    import pyspark

    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java") or ""
    java = os.path.realpath(java)
    jars = Path(pyspark.__file__).parent / "jars"
    key = "|".join(
        [
            java,
            str(os.stat(java).st_mtime_ns) if os.path.exists(java) else "",
            pyspark.__version__,
            ",".join(sorted(os.listdir(jars))) if jars.is_dir() else "",
            _FAST_JVM_FLAGS if _FAST_JVM_FLAGS in flags else "",
        ]
    )
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"spark-{hashlib.sha1(key.encode()).hexdigest()[:16]}.jsa"


def _class_archive_flag(archive: Path) -> str:
    """Use `archive` if it is there, else have this JVM write one at exit into a temp file
    (renamed into place by finish_class_archive once the JVM has exited cleanly: a partly
    written archive would crash the next JVM)."""
    global _pending_archive
    if archive.exists():
        return f"-XX:SharedArchiveFile={archive}"
    temp = archive.with_name(f"{archive.name}.{uuid.uuid4().hex[:8]}.tmp")
    _pending_archive = (temp, archive)
    return f"-XX:ArchiveClassesAtExit={temp}"


def default_class_archive_dir() -> Path:
    """``$METALEDGER_SPARK_CACHE``, else ``$XDG_CACHE_HOME/metaledger`` (``~/.cache``)."""
    explicit = os.environ.get("METALEDGER_SPARK_CACHE")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "metaledger"


def finish_class_archive(timeout_s: float = 120) -> bool:
    """If this process's JVM is recording a class archive: shut the JVM down (after the
    context's ``stop()``; the next context starts a new JVM), wait for it to write the
    archive as it exits, and move the archive into place. True when one was installed."""
    global _pending_archive
    pending, _pending_archive = _pending_archive, None
    if pending is None:
        return False
    from pyspark import SparkContext

    temp, archive = pending
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    try:
        if gateway is not None:
            with contextlib.suppress(Exception):
                gateway.shutdown()
            SparkContext._gateway = None
            SparkContext._jvm = None
        if proc is None:
            return False
        with contextlib.suppress(Exception):
            proc.stdin.close()  # the gateway's main exits (System.exit) at EOF on stdin
        try:
            proc.wait(timeout_s)
        except Exception:
            proc.kill()
            proc.wait()
            return False
        if proc.returncode == 0 and temp.exists() and temp.stat().st_size > 0:
            os.replace(temp, archive)
            return True
        return False
    finally:
        temp.unlink(missing_ok=True)


def make_spark_session(
    master: str = DEFAULT_MASTER,
    *,
    work_dir: str | os.PathLike[str],
    **options: Any,
) -> SparkSession:
    """A SparkSession on :func:`make_spark_context` (same options), for DataFrame users
    (the tests' shared session, the bench's Parquet variant); ``stop()`` stops both."""
    from pyspark.sql import SparkSession

    return SparkSession(make_spark_context(master, work_dir=work_dir, **options))


def _code_zip(work: Path) -> Path:
    """A zip of the ``snapshots`` and ``protos`` packages for the executors."""
    root = Path(__file__).resolve().parents[2]
    target = work / "metaledger-code.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for package in ("snapshots", "protos"):
            for path in sorted((root / package).rglob("*.py")):
                z.write(path, path.relative_to(root).as_posix())
    return target
