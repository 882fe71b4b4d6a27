"""nodewarden: keeps GPU training nodes honest.

Validator, fault-telemetry agent, kernel-log parsers and offline failure statistics
after §VII-B/C of the Fire-Flyer AI-HPC paper (arXiv 2408.14158).
"""

__version__ = "0.1.0"
