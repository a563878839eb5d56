"""The web console: a separate process that shows a metaledger cluster in a browser.

``metaledger console --listen HOST:PORT`` (default ``127.0.0.1:9870``, DESIGN.md §6) serves
HTML pages and the JSON endpoints under ``/api/`` they call. It is an ordinary client of the
cluster through :mod:`nameserver.client` (import-linter holds it to that and :mod:`rmq`)::

    config      ConsoleConfig: where to listen, the clusters by name, read-only or not
    errors      the one error tree (ConsoleError and a class per HTTP status)
    clusters    ClusterView: one cluster's client, its status and a bounded sampler
    keys        the Keys page's reads and writes: a paged prefix tree, search, history
    leases      the Leases, locks and elections page: paged leases, locks by their keys
    users       the Users and roles page: auth on/off, users, roles, confirmed changes
    sessions    logins: a browser's session id (an HttpOnly cookie) to a user's client
    app         the Starlette application: pages, /api/ routes, errors as JSON
    cli         ``register(subparsers, common)``: ``metaledger console`` (an entry point)

The browser side is plain files under ``static/`` (no build step); the chart library
(uPlot) is vendored there with its licence by ``scripts/vendor_uplot.sh``.
"""

from console.app import create_app
from console.config import ClusterSpec, ConsoleConfig

__all__ = ["ClusterSpec", "ConsoleConfig", "create_app"]
