"""coordinator: hands out data tasks to trainers with leases and records progress durably.

Owns: the task queue (partitions split into file/byte-range tasks), leases and their
expiry, the durable progress record (which tasks are done, which partitions are exported),
and telling one trainer when a partition is complete so it exports/checkpoints.
Must not: read sample data, talk to parameter servers, or decide model quality.
"""

from elasticctr.coordinator.core import Coordinator, Lease, PartitionSpec, Task

__all__ = ["Coordinator", "Lease", "PartitionSpec", "Task"]
