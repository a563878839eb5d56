"""Message lookup by key and by message id: the remoting front of the store's index.

- :mod:`broker.lookup.query`: what an index entry points at, read back (only a whole record
  of that topic holding that key).
- :mod:`broker.lookup.processor`: remoting QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33), and
  :class:`~broker.lookup.processor.MessageLookup`, which the gRPC admin service's QueryMessage
  (:mod:`broker.grpc.admin`) uses too.

The index itself (RocketMQ's index files: hash slots and chained entries, ``topic#KEY`` and
``topic#UNIQ_KEY`` → commit-log offset) is the store's: :mod:`broker.store.index` and
:mod:`broker.store.index_file`, fed by its put, replicated and recovery paths.
"""
