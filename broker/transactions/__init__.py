"""Transactional messages, RocketMQ's half/op design.

    half.py       half, op and committed records, and how ops match halves (pure)
    service.py    TransactionService: ending a transaction (idempotent), the op index, the
                  check's progress in the offset store
    check.py      CheckService: the check-back of halves left without an end
    processor.py  END_TRANSACTION (37) over remoting
    client.py     what a producer sends (``metaledger send --transaction``)
    flags.py      the broker command's transaction flags
    errors.py     the refusals

The prepare itself goes through the send path (``broker.send``), the gRPC front's parts are in
``broker.grpc.transactions``, the producers' connections in ``broker.state.producers``.
"""
