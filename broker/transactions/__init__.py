"""Transactional messages (RocketMQ's half/op design): :mod:`.half` (records, pure),
:mod:`.service` (prepare, end, the op index), :mod:`.check` (the check-back),
:mod:`.processor` (END_TRANSACTION over remoting), :mod:`.errors`."""
