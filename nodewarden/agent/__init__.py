"""``nodewarden agent``: the per-node daemon.

Modules: :mod:`~nodewarden.agent.daemon` (``run(args)``: wiring, signals, main loop),
:mod:`~nodewarden.agent.config` (the TOML file and the flags),
:mod:`~nodewarden.agent.follower` (``/dev/kmsg`` -> events -> counters, exactly once across
restarts), :mod:`~nodewarden.agent.poller` (the polled NVML/sysfs collectors, called one after
another in a thread of their own, each with a timeout; their events and the flash-cut detector of
:mod:`~nodewarden.parsing.flashcut`),
:mod:`~nodewarden.agent.schedule` (the weekly ``nodewarden validate`` run),
:mod:`~nodewarden.agent.exporter` (the Prometheus series and their collector),
:mod:`~nodewarden.agent.state` (``state.json`` and the bounded event journal),
:mod:`~nodewarden.agent.server` (``/metrics`` and ``/healthz``).
"""
