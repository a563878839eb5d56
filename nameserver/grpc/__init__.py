"""The gRPC front: request context, admin services, accept loops, request guard, core environment, method table, status mapping."""
