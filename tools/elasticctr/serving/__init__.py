"""The prediction service: request decoding, dynamic batching, cube lookups, dense model.

Owns `ectl serve` (the serving image's entry point), `ectl predict` (its client) and the
MLflow pyfunc flavour of an exported version. The scoring computation (pool per slot +
dense forward) lives once in `elasticctr.serving.model` and is shared by the server and
the pyfunc. It reads versions from the model store and embeddings from cube; it never
writes either.
"""
