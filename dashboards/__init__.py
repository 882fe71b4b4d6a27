"""nodewarden's monitoring mixin: Grafana dashboards, Prometheus alert and recording rules,
generated from the Python under :mod:`dashboards.mixin`. Not part of the installed package;
``python3 -m dashboards.mixin.build`` (from the repository root) writes the files."""
