"""ElasticCTR: distributed CTR training and online serving, one package for every part.

Parts, lowest first (tests/unit/test_import_graph.py keeps the imports between them
acyclic): `constants`, `errors`, `zoo` (model defaults), `versions` (the model version
contract), `net`; `data` (line format, storage URLs), `modelstore`, `supervisor`
(processes); `fileserver`, `coordinator`, `cube`, `serving`, `train`; `values` (the
chart's values); `local` (the system on one machine); `cli` (`ectl`).
"""

__version__ = "0.1.0"
