"""local: run the system's entry points as processes on one machine.

Owns: starting, watching, restarting and stopping local processes (one log file per
component), mirroring the restart policies Kubernetes/Volcano apply to the same parts.
Must not know what a component does: callers describe components with `Component`.
"""

from elasticctr.local.supervisor import Component, RestartPolicy, Supervisor

__all__ = ["Component", "RestartPolicy", "Supervisor"]
