"""RocketMQ 5 clients over gRPC (``apache.rocketmq.v2.MessagingService``): producers of normal
and FIFO messages, simple and push consumers. ``service`` holds the handlers, ``consume`` the
consumers' (over the replica's POP service), ``front`` the server and the replica's side."""
