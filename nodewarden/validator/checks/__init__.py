"""The validator's checks, one module each (a ``NAME``, ``NEEDS``, ``DEFAULTS``, ``QUICK`` and
``run(ctx, params)``); :mod:`nodewarden.validator.registry` lists them in the suite's order. The
checks never import each other: what they share is in :mod:`nodewarden.validator.base`."""
