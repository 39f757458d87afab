"""ElasticCTR: distributed CTR training and online serving, one package for every part."""

__version__ = "0.1.0"
