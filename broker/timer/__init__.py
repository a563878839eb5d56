"""Timer messages (RocketMQ 5's timer wheel): delivery at any time up to ``timerMaxDelaySec``.

    message    which sends are timer messages; onto ``rmq_sys_wheel_timer`` and back (sans-I/O)
    wheel      TimerWheel: one-second slots over an append-only timer log, on disk
    progress   DeliveryProgress: a delivery loop's positions, reloaded by a new master
    service    TimerService: dispatch into the wheel, fire each second, remember how far

The send processor calls :func:`~broker.timer.message.to_timer`; ``replica.py`` runs the
service. Errors: :class:`~broker.timer.message.TimerMessageIllegal` (a ``BrokerRequestError``:
MESSAGE_ILLEGAL), :class:`~broker.timer.wheel.TimerWheelError` (files that are not a wheel).
"""
