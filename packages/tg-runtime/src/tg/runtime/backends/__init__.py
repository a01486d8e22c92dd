"""Device backends: one module per device name (``cpu.py`` -> ``CPU``), each defining a ``<NAME>Device`` class."""
