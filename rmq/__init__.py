"""RocketMQ's wire, written once for everyone who speaks it.

The nameserver's remoting front, the broker and both replicators import RocketMQ's protocol
from here and nowhere else (``docs/architecture.md``): the sans-I/O remoting codec, one table
of request and response codes, typed headers, the message encoding (stored record, batch,
properties, message ids, compressed bodies), one frame-server loop and one pipelined client
connection. The parsers are sans-I/O (bytes in, commands out); only the thin asyncio modules
touch sockets. Nothing here knows metaledger: this package imports no other project package
but the generated ``protos``.
"""
