"""The one source of the dashboards, the alert rules and the recording rules (see
``dashboards/README.md``). :mod:`.config` holds the tunables, :mod:`.promql` the query
building blocks shared by rules and panels."""
