"""Nodes: metadata tenant owners may not set on the nodes they are allowed to patch."""
