"""``nodewarden agent``: the per-node daemon.

Modules: :mod:`~nodewarden.agent.daemon` (``run(args)``: wiring, signals, main loop),
:mod:`~nodewarden.agent.follower` (``/dev/kmsg`` -> events -> counters, exactly once across
restarts), :mod:`~nodewarden.agent.exporter` (the Prometheus series and their collector),
:mod:`~nodewarden.agent.state` (``state.json`` and the event journal),
:mod:`~nodewarden.agent.server` (``/metrics`` and ``/healthz``).
"""
