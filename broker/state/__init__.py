"""What the request handlers share, below the core: the state they read and change together.

    consumers   ConsumerRegistry: each consumer group's clients, connections, subscriptions
    producers   ProducerRegistry: each producer group's live connections (transaction checks)
    locks       LockManager: queue locks of orderly consumers
    offsets     OffsetStore (in memory, or in metaledger's KV): consumer offsets
    hold        PullHold: parked long polls, woken by the write path

The layers of one replica, each importing only those below it::

    replica.py                     wires the handlers in (one RemotingServer, one table)
    send/ pull/ consumers/ admin/  the request handlers (processor.py each)
    core.py                        BrokerCore: the write path and what every handler shares
    state/, store/, replication.py, topics.py, config.py, metrics.py

``tests/unit/test_import_cycles.py`` holds the broker (and the replicators) to it: no import
cycle between modules, nor between the modules and packages side by side in one package.
"""
