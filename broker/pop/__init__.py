"""POP consumption (RocketMQ 5's pop/ack model), shared by the remoting and gRPC fronts.

See :mod:`broker.pop.service` for the design; modules:

    handle.py     the receipt handle codec (RocketMQ's ExtraInfoUtil layout)
    state.py      one (group, topic, queue) book: low, next, slots (sans-I/O)
    table.py      the slots on disk (12 bytes per popped message) and every book of a replica
    progress.py   the books' progress in metaledger (low, next, acks above low)
    service.py    PopService: pop, ack, change_invisible, forward_to_dlq (async)
    processor.py  the remoting handlers (200050, 200051, 200053, 200151)
    errors.py     PopError and its subclasses
"""
