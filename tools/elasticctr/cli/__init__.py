"""ectl: the operator CLI. One module per verb group, joined in `main.py`."""
