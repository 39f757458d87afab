"""fileserver: the HTTP artifact store (slot config, data, model versions).

Owns: serving a directory tree over HTTP (GET/HEAD with ranges, HTML/JSON listings that
fsspec's HTTP filesystem understands) and authenticated, atomic writes (PUT/POST/DELETE
with a bearer token). Must not know what the files mean: the model-store layout and its
verification are `elasticctr.versions` and `elasticctr.modelstore`.
"""

from elasticctr.fileserver.server import FileServer, serve

__all__ = ["FileServer", "serve"]
