"""fileserver: the HTTP artifact store (slot config, data, model versions).

Owns: serving a directory tree over HTTP (GET/HEAD with ranges, HTML/JSON listings that
fsspec's HTTP filesystem understands) and authenticated, atomic writes (PUT/POST/DELETE
with a bearer token). Must not know what the files mean: model-store layout and
verification belong to the training export and cube-transfer.
"""

from elasticctr.fileserver.server import FileServer, serve

__all__ = ["FileServer", "serve"]
