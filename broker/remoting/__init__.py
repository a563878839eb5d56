"""The broker's RocketMQ remoting front: its asyncio frame server, code tables and typed headers.

Frames are the shared sans-I/O codec's (``rmq.codec``); the server and code
tables are the broker's own, because import-linter lets a broker use only the nameserver's
client and codec.
"""

from broker.remoting.errors import BrokerRequestError
from broker.remoting.server import Handler, Peer, RemotingServer
from rmq.codes import RequestCode, ResponseCode

__all__ = ["BrokerRequestError", "Handler", "Peer", "RemotingServer", "RequestCode", "ResponseCode"]
