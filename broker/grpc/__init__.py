"""RocketMQ 5 clients over gRPC (``apache.rocketmq.v2.MessagingService``): producers of normal
messages for now. ``service`` holds the handlers, ``front`` the server and the replica's side."""
