"""Cube: the sharded sparse-embedding service (builder, shard server, transfer).

Owns the shard file format, the lookup protocol and the version switch of the shards.
It reads model versions through `elasticctr.modelstore` and never writes to the store;
serving talks to it only through `elasticctr.cube.client` and `protocol.py`.
"""

from elasticctr.cube.format import shard_of

__all__ = ["shard_of"]
