"""etcd key-value pairs: records and sub-image, the rules of Range/Put/DeleteRange/Txn, the KV gRPC service."""
