"""Suite-wide settings: the event cache of `nodewarden events/analyze` (on by default, under
$XDG_CACHE_HOME) goes to a temporary directory, never into the user's home."""

from __future__ import annotations

import os
import tempfile

os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="nodewarden-test-cache-")
