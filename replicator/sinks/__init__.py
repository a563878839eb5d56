"""Where replicated writes go: one small interface (``base.Sink``) with a RocketMQ sink (the
project's own remoting codec, and the ``rocketmq`` wheel) and a file/stdout sink."""
