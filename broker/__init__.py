"""The quorum-write broker: a RocketMQ broker replica whose replica group lives in metaledger.

``metaledger broker`` runs one replica. RocketMQ clients send and pull over the remoting
protocol (RocketMQ's wire is ``rmq``'s); a send is acknowledged by the group's policy: at
once (async), once one slave has it (RocketMQ 4's sync), or once ``needAckNums`` in-sync
replicas have it (RocketMQ 5's quorum write). metaledger names the master, keeps the in-sync
set and its epochs, the routes and the consumer offsets, so a failover neither loses an
acknowledged message nor moves a consumer group back. The broker talks to metaledger only
through ``nameserver.client``, as any program would.

Packages, the store at the bottom and the fronts on top::

    store/        the commit log, consume queues, recovery, flush, retention
    ha/           slave copies of the master's commit log (RocketMQ 5's auto-switch HA)
    quorum/       who must acknowledge a send (policy), the in-sync set, the replica's role
    send/, pull/, consumers/, admin/
                  the remoting handlers, one processor per concern
    pop/          POP consumption (receipt handles, invisible time, redelivery, DLQ, FIFO)
                  for the remoting and gRPC fronts
    remoting/     the broker's wiring of rmq's frame server: its handler table and errors
    replica.py    one replica wired together; cli.py runs it

See docs/broker.md for what a user sees and docs/architecture.md for the layers.
"""
