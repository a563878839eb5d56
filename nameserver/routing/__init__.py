"""RocketMQ route data: records, apply rules, the gRPC service, remoting handlers, broker liveness (a leader duty)."""
