"""Generated protobuf and gRPC code for primus.v1: never edit by hand, run scripts/gen_protos.py."""
