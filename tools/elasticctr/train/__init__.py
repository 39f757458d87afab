"""train: the Paddle Fleet parameter-server roles (pserver and elastic trainer), the model
zoo's networks, the export of a trained hour as a model version and its MLflow
registration.

Owns what runs inside one role process: the role environment (`env.py`), the values a
role reads (`config.py`), the networks (`models.py`; defaults in `elasticctr.zoo`), the
Paddle program and Fleet runtime both roles share (`program.py`, fed by `feeds.py` or the
native pipeline `native.py`), the pserver role (`pserver.py`) and the elastic trainer
(`elastic.py`), reading PS dumps into a version (`export.py`), the job's MLflow run
(`tracking.py`) and `registry.py`. Must not start or supervise processes (local jobs are
`elasticctr.local.training`) and must not be imported to read a version (that is
`elasticctr.versions` / `elasticctr.modelstore`).
"""
