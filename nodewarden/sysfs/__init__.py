"""The read layer for ``/sys``: one module per kernel path, read by the validator's checks and the
agent's collectors alike (so that a check and a metric cannot read one file two ways).

``attrs``: the counting attribute reader and directory listing every module uses;
``infiniband``: ``/sys/class/infiniband`` devices and ports, and the "port active" and "link
layer" rules; ``pci``: ``/sys/bus/pci/devices`` functions, their links (the "PCIe width" and
"generation" rules) and AER statistics; ``net``: ``/sys/class/net`` interfaces and the
"physical interface" rule; ``edac``: ``/sys/devices/system/edac`` memory controllers;
``cpufreq``: ``/sys/devices/system/cpu/cpu*/cpufreq`` and the ``cpu MHz`` of
``/proc/cpuinfo``. Each returns frozen records (one field per file); the root is a parameter,
an absent directory gives ``[]``, an unreadable file gives None for its field and is counted.
No metrics, thresholds or events here.
"""
