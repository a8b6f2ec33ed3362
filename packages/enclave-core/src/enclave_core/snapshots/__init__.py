"""Compiled snapshots streamed over gRPC from the controller that owns a kind to every admission replica.

``hub`` keeps the latest snapshot per kind and fans it out; ``server`` exposes a hub as a gRPC service;
``subscriber`` is the client side that reconnects with backoff and keeps the last good snapshot.
"""
