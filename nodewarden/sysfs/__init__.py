"""The read layer for ``/sys``: one module per kernel path, read by the validator's checks and the
agent's collectors alike (so that a check and a metric cannot read one file two ways).

``attrs``: the attribute reader and directory listing every module uses; ``infiniband``:
``/sys/class/infiniband`` value forms; ``pci``: ``/sys/bus/pci/devices`` link speed and width
forms. No metrics, thresholds or events here.
"""
