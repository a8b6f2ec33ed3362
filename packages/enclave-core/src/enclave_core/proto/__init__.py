"""Generated gRPC stubs (hack/gen_protos.py); do not edit."""
