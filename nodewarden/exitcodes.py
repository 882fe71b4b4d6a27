"""Process exit codes, in one place (the CLI maps typed errors to them)."""

OK = 0  # healthy / success
UNHEALTHY = 1  # validator found a fault: drain the node
USAGE = 2  # usage or configuration error
INCOMPLETE = 3  # could not complete (e.g. an input could not be read)
