"""local: the whole system on one machine, as processes on loopback.

Owns: the local stack (fileserver, MLflow, cube shards and transfer, serving:
`stack.py`), the quickstart (`quickstart.py`), the local deployment (`runner.py`) and
local training jobs, static and elastic (`training.py`, behind `ectl train --local`).
Process supervision itself is `elasticctr.supervisor` (neutral: it knows nothing of what
a component does); the trainer runtime is `elasticctr.train`, which never imports this
package.
"""
