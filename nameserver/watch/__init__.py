"""etcd watches: events, history (replay), the hub that fans changes out, the Watch gRPC service."""
