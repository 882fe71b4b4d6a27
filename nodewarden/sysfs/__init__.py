"""The read layer for ``/sys``: one module per kernel path, read by the validator's checks and the
agent's collectors alike (so that a check and a metric cannot read one file two ways).

``attrs``: the counting attribute reader and directory listing every module uses;
``infiniband``: ``/sys/class/infiniband`` devices and ports, and the "port active" and "link
layer" rules; ``pci``: ``/sys/bus/pci/devices`` functions, their links (the "PCIe width" and
"generation" rules) and AER statistics; ``net``: ``/sys/class/net`` interfaces and the
"physical interface" and "link up" rules; ``edac``: ``/sys/devices/system/edac`` memory controllers;
``cpufreq``: ``/sys/devices/system/cpu/cpu*/cpufreq`` and the ``cpu MHz`` of
``/proc/cpuinfo`` (the "CPU frequency" rule); ``cpu_cache``: ``/sys/devices/system/cpu/cpu*/cache``
(the L3 size the host-memory check sizes its arrays by). Each returns frozen records (one field per file); the root is a parameter,
an absent directory gives ``[]``, an unreadable file (or one not of its form, or no regular
file: a FIFO is never opened for reading) gives None for its field and is counted.
No metrics, thresholds or events here.
"""
