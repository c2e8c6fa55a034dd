"""Rules beside groundedness: one interface (``base.py``), one registry (``registry.py``)."""
