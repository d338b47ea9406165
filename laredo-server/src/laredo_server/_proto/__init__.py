"""Generated gRPC code (scripts/gen_proto.py)."""
