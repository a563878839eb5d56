"""A node's defaults that ``serve --help`` prints and :class:`nameserver.config.ServerConfig`
takes, in one place. The client port is where every client looks by default, so it comes
from the client library (``nameserver.client.DEFAULT_ENDPOINTS``), the one place both read.

Listen addresses are loopback: a node answers only on this machine until its operator names
an address other hosts reach (``0.0.0.0:PORT`` for every interface, as in docs/operations.md
"Nodes on separate machines"). The ports are docs/operations.md's ("Ports").
"""

from __future__ import annotations

from nameserver.client import DEFAULT_ENDPOINTS

LISTEN_CLIENT = DEFAULT_ENDPOINTS  # gRPC client API (etcd v3 + metaledger.v1): 127.0.0.1:9877
LISTEN_PEER = "127.0.0.1:9878"  # Raft peers
LISTEN_REMOTING = "127.0.0.1:9876"  # RocketMQ remoting (the nameserver's route front)
LISTEN_METRICS = "127.0.0.1:9879"  # metrics HTTP: GET /metrics, /health
#: like etcd's --initial-cluster-token: the cluster id derives from it, so every cluster
#: started with this one has the same id (``serve`` warns; ``cluster up`` makes one per cluster)
CLUSTER_TOKEN = "metaledger"
