"""Generated protobuf and gRPC code (see scripts/gen_protos.sh). Never edit by hand."""
