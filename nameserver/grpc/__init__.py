"""The gRPC front, adapters over the node's facade (:mod:`nameserver.node`): the rpc decorator and status mapping, admin services, accept loops, request guard, core environment, method table."""
