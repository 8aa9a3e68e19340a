"""Generated protobuf modules (see ``protos/`` and ``scripts/generate_protos.py``)."""
