"""The Starlette application: the pages (static HTML that calls ``/api/``), the JSON
endpoints, and the one place errors become answers.

Every ``/api/`` answer is JSON. A :class:`~console.errors.ConsoleError` answers its
``status`` and message; a client error answers 503 when the cluster cannot be reached and 400
when it refused the request (its message, as the CLI prints it); anything else is logged with
its traceback and answers 500 with one line: no page ever shows a traceback. The blocking
client calls run in Starlette's thread pool.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from importlib import resources
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from console import keys, leases, replicators, rocketmq, rocketmq_groups, transfer, users
from console.clusters import ClusterView, Sampler
from console.config import ConsoleConfig
from console.errors import BadInput, ConsoleError, NotFound
from console.sessions import COOKIE, Sessions
from console.tails import Tails
from nameserver.client import (
    Client,
    ClientError,
    DeadlineExceeded,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)

__all__ = ["Console", "create_app"]

log = logging.getLogger("console")
T = TypeVar("T")

STATIC = resources.files("console") / "static"
#: the largest import document accepted
MAX_IMPORT_BYTES = 64 * 1024 * 1024
PAGES = {
    "/": "cluster.html",
    "/keys": "keys.html",
    "/leases": "leases.html",
    "/users": "users.html",
    "/rocketmq": "rocketmq.html",
    "/replicators": "replicators.html",
}


class Console:
    """The views of every cluster, their sampler, and whether writes are allowed."""

    def __init__(self, config: ConsoleConfig) -> None:
        self.config = config.validate()
        self.views = {s.name: ClusterView(s, config) for s in config.clusters}
        self.sampler = Sampler(list(self.views.values()), config)
        self.sessions = Sessions()
        self.tails = Tails()

    def view(self, request: Request) -> ClusterView:
        name = request.query_params.get("cluster") or next(iter(self.views))
        view = self.views.get(name)
        if view is None:
            raise NotFound(f"no cluster named {name!r} (known: {', '.join(self.views)})")
        return view

    def client(self, request: Request) -> Client:
        """The client an API call runs as: the browser's login to the cluster, else the
        console's own (its ``--user``, or none)."""
        view = self.view(request)
        login = self.sessions.login(request.cookies.get(COOKIE), view.name)
        return login[1] if login is not None else view.client

    def close(self) -> None:
        self.tails.close_all()
        self.sessions.close()
        self.sampler.stop()
        for v in self.views.values():
            v.close()


def _int(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name, "")
    if raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise BadInput(f"{name} must be a whole number, not {raw!r}") from None


def _bytes_param(params: Any, name: str, required: bool = False) -> bytes:
    """``name`` as UTF-8 text, or ``name_hex`` as hex (keys that are not UTF-8)."""
    hexed = params.get(f"{name}_hex")
    if hexed:
        try:
            return bytes.fromhex(str(hexed))
        except ValueError:
            raise BadInput(f"{name}_hex is not hex: {hexed!r}") from None
    value = params.get(name)
    if value is None or (required and value == ""):
        if required:
            raise BadInput(f"{name} is missing")
        return b""
    if not isinstance(value, str):
        raise BadInput(f"{name} must be a string")
    return value.encode()


def _cursor(request: Request) -> bytes | None:
    raw = request.query_params.get("cursor")
    if not raw:
        return None
    try:
        return bytes.fromhex(raw)
    except ValueError:
        raise BadInput(f"cursor is not hex: {raw!r}") from None


async def _blocking(fn: Callable[..., T], *args: Any) -> T:
    return await run_in_threadpool(fn, *args)


def create_app(config: ConsoleConfig) -> Starlette:
    console = Console(config)

    async def clusters(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "clusters": [
                    {"name": v.name, "endpoints": v.endpoints} for v in console.views.values()
                ],
                "allow_writes": config.allow_writes,
            }
        )

    async def cluster_status(request: Request) -> JSONResponse:
        return JSONResponse(await _blocking(console.view(request).status))

    async def samples(request: Request) -> JSONResponse:
        view = console.view(request)
        seconds = _int(request, "seconds", 300)
        if not 1 <= seconds <= 86400:
            raise BadInput("seconds must be 1..86400")
        return JSONResponse(console.sampler.series(view.name, seconds))

    async def key_list(request: Request) -> JSONResponse:
        client = console.client(request)
        prefix = _bytes_param(request.query_params, "prefix")
        limit = _int(request, "limit", 100)
        out = await _blocking(keys.list_children, client, prefix, _cursor(request), limit)
        return JSONResponse(out)

    async def key_search(request: Request) -> JSONResponse:
        client = console.client(request)
        p = request.query_params
        out = await _blocking(
            keys.search,
            client,
            _bytes_param(p, "prefix"),
            _bytes_param(p, "q"),
            p.get("by", "key"),
            _cursor(request),
            _int(request, "limit", 50),
        )
        return JSONResponse(out)

    async def key_value(request: Request) -> JSONResponse:
        client = console.client(request)
        key = _bytes_param(request.query_params, "key", required=True)
        out = await _blocking(keys.get_value, client, key, _int(request, "revision", 0))
        return JSONResponse(out)

    async def key_history(request: Request) -> JSONResponse:
        client = console.client(request)
        key = _bytes_param(request.query_params, "key", required=True)
        out = await _blocking(keys.history, client, key, _int(request, "limit", 20))
        return JSONResponse(out)

    async def lease_list(request: Request) -> JSONResponse:
        client = console.client(request)
        raw = request.query_params.get("cursor", "")
        cursor = leases.parse_lease_id(raw) if raw else 0
        out = await _blocking(leases.lease_page, client, cursor, _int(request, "limit", 100))
        return JSONResponse(out)

    async def lock_list(request: Request) -> JSONResponse:
        client = console.client(request)
        prefix = _bytes_param(request.query_params, "prefix")
        limit = _int(request, "limit", 50)
        out = await _blocking(leases.lock_page, client, prefix, _cursor(request), limit)
        return JSONResponse(out)

    async def rmq_topics(request: Request) -> JSONResponse:
        client = console.client(request)
        p = request.query_params
        system = p.get("system", "") in ("1", "true")
        out = await _blocking(
            rocketmq.topic_page,
            client,
            p.get("cursor", ""),
            _int(request, "limit", 50),
            p.get("q", ""),
            system,
        )
        return JSONResponse(out)

    async def rmq_offsets(request: Request) -> JSONResponse:
        client = console.client(request)
        topic = request.query_params.get("topic", "")
        out = await _blocking(rocketmq.queue_offsets, client, topic, config.timeout_s)
        return JSONResponse(out)

    async def rmq_brokers(request: Request) -> JSONResponse:
        client = console.client(request)
        out = await _blocking(rocketmq.brokers, client)
        out.update(await _blocking(rocketmq.replica_groups, client, config.timeout_s))
        return JSONResponse(out)

    async def rmq_lag(request: Request) -> JSONResponse:
        client = console.client(request)
        p = request.query_params
        out = await _blocking(
            rocketmq.consumer_lag, client, p.get("group", ""), p.get("topic", ""), config.timeout_s
        )
        return JSONResponse(out)

    async def rmq_producers(request: Request) -> JSONResponse:
        client = console.client(request)
        group = request.query_params.get("group", "")
        out = await _blocking(rocketmq_groups.group_producers, client, group, config.timeout_s)
        return JSONResponse(out)

    async def replicator_list(request: Request) -> JSONResponse:
        return JSONResponse(await _blocking(replicators.overview, console.client(request)))

    async def tail_open(request: Request) -> JSONResponse:
        view = console.view(request)
        client = console.client(request)
        prefix = _bytes_param(request.query_params, "prefix")
        return JSONResponse(await _blocking(console.tails.open, view.name, client, prefix))

    async def tail_events(request: Request) -> JSONResponse:
        tail = console.tails.get(request.query_params.get("id", ""))
        return JSONResponse({**tail.since(_int(request, "after", 0)), "open": len(console.tails)})

    async def tail_close(request: Request) -> JSONResponse:
        tail_id = request.query_params.get("id", "")
        return JSONResponse({"closed": await _blocking(console.tails.close, tail_id)})

    async def rmq_groups(request: Request) -> JSONResponse:
        client, p = console.client(request), request.query_params
        out = await _blocking(
            rocketmq_groups.group_page,
            client,
            p.get("cursor", ""),
            _int(request, "limit", 50),
            p.get("q", ""),
            config.timeout_s,
        )
        return JSONResponse(out)

    async def rmq_clients(request: Request) -> JSONResponse:
        client, group = console.client(request), request.query_params.get("group", "")
        out = await _blocking(rocketmq_groups.group_clients, client, group, config.timeout_s)
        return JSONResponse(out)

    async def rmq_message(request: Request) -> JSONResponse:
        client, p = console.client(request), request.query_params
        out = await _blocking(
            rocketmq_groups.find_messages,
            client,
            p.get("topic", ""),
            p.get("key", ""),
            p.get("id", ""),
            config.timeout_s,
        )
        return JSONResponse(out)

    async def key_diff(request: Request) -> JSONResponse:
        client = console.client(request)
        key = _bytes_param(request.query_params, "key", required=True)
        old, new = _int(request, "from", 0), _int(request, "to", 0)
        return JSONResponse(await _blocking(transfer.diff, client, key, old, new))

    async def key_export(request: Request) -> Response:
        client = console.client(request)
        prefix = _bytes_param(request.query_params, "prefix")
        chunks = transfer.export_chunks(client, prefix)
        first = await _blocking(next, chunks)  # errors before the first byte answer as JSON
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in keys.key_text(prefix))

        async def body() -> AsyncIterator[str]:
            yield first
            async for chunk in iterate_in_threadpool(chunks):
                yield chunk

        return StreamingResponse(
            body(),
            media_type="application/json",
            headers={"Content-Disposition": f'attachment; filename="export-{name or "all"}.json"'},
        )

    async def key_import(request: Request) -> JSONResponse:
        client = console.client(request)
        size = request.headers.get("content-length", "")
        if size.isdigit() and int(size) > MAX_IMPORT_BYTES:
            raise BadInput(f"an import document is {MAX_IMPORT_BYTES} bytes at most")
        body = await _body(request)
        confirm = str(body.get("confirm", ""))
        doc = body.get("document")
        out = await _blocking(transfer.import_kvs, client, config.allow_writes, doc, confirm)
        log.info("imported %d keys under %r at revision %d", out["written"], out["prefix"],
                 out["revision"])  # fmt: skip
        return JSONResponse(out)

    async def session(request: Request) -> JSONResponse:
        view = console.view(request)
        login = console.sessions.login(request.cookies.get(COOKIE), view.name)
        client = login[1] if login is not None else view.client
        try:
            enabled: bool | None = await _blocking(client.auth_enabled)
        except ClientError:
            enabled = None  # unreachable: the page says so elsewhere
        return JSONResponse(
            {
                "cluster": view.name,
                "user": login[0] if login is not None else None,
                "console_user": view.user,
                "auth_enabled": enabled,
            }
        )

    async def login(request: Request) -> JSONResponse:
        view = console.view(request)
        body = await _body(request)
        user, password = body.get("user"), body.get("password")
        if not isinstance(user, str) or not user:
            raise BadInput("user is missing")
        if not isinstance(password, str):
            raise BadInput("password must be a string")
        client = view.connect_as(user, password)
        try:
            await _blocking(client.user_get, user)  # authenticates, then reads its own roles
        except BaseException:
            client.close()
            raise
        sid = console.sessions.add(request.cookies.get(COOKIE), view.name, user, client)
        log.info("%s logged in to cluster %s", user, view.name)
        resp = JSONResponse({"cluster": view.name, "user": user})
        resp.set_cookie(COOKIE, sid, httponly=True, samesite="strict", path="/")
        return resp

    async def logout(request: Request) -> JSONResponse:
        view = console.view(request)
        user = await _blocking(console.sessions.logout, request.cookies.get(COOKIE), view.name)
        return JSONResponse({"cluster": view.name, "user": user})

    async def user_list(request: Request) -> JSONResponse:
        return JSONResponse(await _blocking(users.overview, console.client(request)))

    async def user_change(request: Request) -> JSONResponse:
        client = console.client(request)
        body = await _body(request)
        out = await _blocking(users.change, client, config.allow_writes, body)
        log.info("%s %s at revision %d", out["action"], out["name"], out["revision"])
        return JSONResponse(out)

    async def _body(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise BadInput("the request body is not JSON") from None
        if not isinstance(body, dict):
            raise BadInput("the request body must be a JSON object")
        return body

    async def key_put(request: Request) -> JSONResponse:
        client = console.client(request)
        body = await _body(request)
        key = _bytes_param(body, "key", required=True)
        value = _bytes_param(body, "value")
        confirm = str(body.get("confirm", ""))
        out = await _blocking(keys.put, client, config.allow_writes, key, value, confirm)
        log.info("put %r (%d bytes) at revision %d", out["key"], out["size"], out["revision"])
        return JSONResponse(out)

    async def key_delete(request: Request) -> JSONResponse:
        client = console.client(request)
        body = await _body(request)
        key = _bytes_param(body, "key", required=True)
        confirm = str(body.get("confirm", ""))
        out = await _blocking(keys.delete, client, config.allow_writes, key, confirm)
        log.info("deleted %r (%d)", out["key"], out["deleted"])
        return JSONResponse(out)

    def page(name: str) -> Callable[[Request], Any]:
        async def serve(request: Request) -> Response:
            return FileResponse(str(STATIC / name), media_type="text/html")

        return serve

    async def console_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ConsoleError)
        return JSONResponse({"error": exc.message}, status_code=exc.status)

    async def client_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ClientError)
        status = 400
        if isinstance(exc, Unavailable | DeadlineExceeded):
            status = 503
        elif isinstance(exc, PermissionDenied):
            status = 403
        elif isinstance(exc, Unauthenticated):
            status = 401
        return JSONResponse({"error": exc.message}, status_code=status)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)

    async def internal_error(request: Request, exc: Exception) -> Response:
        log.exception("%s %s failed", request.method, request.url.path, exc_info=exc)
        return JSONResponse(
            {"error": f"internal error ({type(exc).__name__}); the console's log has the details"},
            status_code=500,
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await run_in_threadpool(console.sampler.sample_once)  # the first log line, if any
        console.sampler.start()
        try:
            yield
        finally:
            await run_in_threadpool(console.close)

    routes = [
        *(Route(path, page(name)) for path, name in PAGES.items()),
        Route("/api/clusters", clusters),
        Route("/api/cluster", cluster_status),
        Route("/api/cluster/samples", samples),
        Route("/api/keys/list", key_list),
        Route("/api/keys/search", key_search),
        Route("/api/keys/value", key_value),
        Route("/api/keys/history", key_history),
        Route("/api/leases", lease_list),
        Route("/api/locks", lock_list),
        Route("/api/session", session),
        Route("/api/login", login, methods=["POST"]),
        Route("/api/logout", logout, methods=["POST"]),
        Route("/api/users", user_list),
        Route("/api/rocketmq/topics", rmq_topics),
        Route("/api/rocketmq/offsets", rmq_offsets),
        Route("/api/rocketmq/brokers", rmq_brokers),
        Route("/api/rocketmq/lag", rmq_lag),
        Route("/api/rocketmq/groups", rmq_groups),
        Route("/api/rocketmq/clients", rmq_clients),
        Route("/api/rocketmq/producers", rmq_producers),
        Route("/api/rocketmq/message", rmq_message),
        Route("/api/users/change", user_change, methods=["POST"]),
        Route("/api/replicators", replicator_list),
        Route("/api/keys/tail/open", tail_open, methods=["POST"]),
        Route("/api/keys/tail", tail_events),
        Route("/api/keys/tail/close", tail_close, methods=["POST"]),
        Route("/api/keys/diff", key_diff),
        Route("/api/keys/export", key_export),
        Route("/api/keys/import", key_import, methods=["POST"]),
        Route("/api/keys/put", key_put, methods=["POST"]),
        Route("/api/keys/delete", key_delete, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=str(STATIC)), name="static"),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            ConsoleError: console_error,
            ClientError: client_error,
            HTTPException: http_error,
            Exception: internal_error,
        },
    )
    app.state.console = console
    return app
