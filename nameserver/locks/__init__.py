"""etcd's lock and election (v3lock, v3election): recipes on the kv store and leases."""
