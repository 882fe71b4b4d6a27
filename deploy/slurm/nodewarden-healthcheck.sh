#!/bin/sh
# nodewarden health check for Slurm: HealthCheckProgram, or called from a Prolog.
#
# Runs `nodewarden validate --quick --no-progress --json FILE`, then by its exit status:
#   0  healthy                         -> exit 0
#   1  a check failed                  -> scontrol update nodename=<node> state=drain reason="<first DRAIN line>"
#   2  usage or configuration error    -> logged; no drain unless NODEWARDEN_DRAIN_ON_USAGE=1
#   3  could not complete (a check     -> logged with the first INCOMPLETE line; no drain unless
#      could not run: no PyTorch or       NODEWARDEN_DRAIN_ON_INCOMPLETE=1
#      GPUs it cannot use on a GPU
#      node, a disk filled meanwhile;
#      or timeout, or nodewarden not installed)
# and exits with that status (NODEWARDEN_SOFT_EXIT=1: exit 0 whenever it did not drain).
#
# Settings (environment, or a file sourced first: /etc/default/nodewarden or $NODEWARDEN_DEFAULTS):
#   NODEWARDEN            the nodewarden command            (default: nodewarden)
#   NODEWARDEN_ARGS       arguments before "$@"             (default: --quick; e.g. "--quick --profile h100_sxm5_80gb")
#   NODEWARDEN_JSON       the JSON report                   (default: /var/lib/nodewarden/healthcheck.json)
#   NODEWARDEN_TIMEOUT    seconds before it is stopped      (default: 55; Slurm kills a HealthCheckProgram at 60 s)
#   NODEWARDEN_NODENAME   Slurm node name                   (default: $SLURMD_NODENAME, else hostname -s)
#   NODEWARDEN_REASON_MAX drain reason length, characters   (default: 128)
#   SCONTROL              the scontrol command              (default: scontrol)
set -u
set -f  # NODEWARDEN_ARGS is split on spaces, never globbed

defaults=${NODEWARDEN_DEFAULTS:-/etc/default/nodewarden}
# shellcheck disable=SC1090
[ -r "$defaults" ] && . "$defaults"

NODEWARDEN=${NODEWARDEN:-nodewarden}
SCONTROL=${SCONTROL:-scontrol}
ARGS=${NODEWARDEN_ARGS:---quick}
TIMEOUT=${NODEWARDEN_TIMEOUT:-55}
JSON=${NODEWARDEN_JSON:-/var/lib/nodewarden/healthcheck.json}
REASON_MAX=${NODEWARDEN_REASON_MAX:-128}
DRAIN_ON_USAGE=${NODEWARDEN_DRAIN_ON_USAGE:-0}
DRAIN_ON_INCOMPLETE=${NODEWARDEN_DRAIN_ON_INCOMPLETE:-0}
SOFT_EXIT=${NODEWARDEN_SOFT_EXIT:-0}
NODE=${NODEWARDEN_NODENAME:-${SLURMD_NODENAME:-$(hostname -s)}}

log() {
    echo "nodewarden-healthcheck: $*" >&2
    if command -v logger >/dev/null 2>&1; then
        logger -t nodewarden-healthcheck -- "$*" 2>/dev/null || true
    fi
}

# A Slurm reason: printable ASCII only, one line, at most REASON_MAX characters. A longer one is
# cut at the last space that leaves room for "..." (ASCII, as the rest), a first word longer than
# that mid-word; a REASON_MAX of 3 or less has no room for the dots and is cut hard.
clean() {
    head -n 1 | LC_ALL=C tr -cd '\40-\176' | LC_ALL=C awk -v max="$REASON_MAX" '
        { s = $0; max += 0
          if (length(s) <= max) { print s; exit }
          if (max <= 3) { print substr(s, 1, max); exit }
          cut = max - 3
          head = substr(s, 1, cut + 1)  # a space just after the room still ends a whole word
          sp = 0
          for (i = cut + 1; i > 0; i--) if (substr(head, i, 1) == " ") { sp = i; break }
          out = (sp > 0) ? substr(s, 1, sp - 1) : substr(s, 1, cut)
          sub(/ +$/, "", out)
          if (out == "") out = substr(s, 1, cut)
          print out "..."; exit }'
}

drain() {
    reason=$(printf '%s\n' "$1" | clean)
    log "draining $NODE: $reason"
    if ! "$SCONTROL" update nodename="$NODE" state=drain reason="$reason"; then
        log "scontrol update nodename=$NODE failed"
    fi
}

out=$(mktemp "${TMPDIR:-/tmp}/nodewarden-healthcheck.XXXXXX") || { log "cannot create a temporary file"; exit 3; }
trap 'rm -f "$out"' EXIT
trap 'rm -f "$out"; exit 143' TERM INT HUP
mkdir -p "$(dirname "$JSON")" 2>/dev/null || true

# shellcheck disable=SC2086
set -- validate $ARGS --no-progress --json "$JSON" "$@"
if [ "$TIMEOUT" -gt 0 ] 2>/dev/null && command -v timeout >/dev/null 2>&1; then
    # SIGTERM first: the checks clean up (the storage check removes its files), then SIGKILL.
    timeout --signal=TERM --kill-after=5 "$TIMEOUT" "$NODEWARDEN" "$@" >"$out" 2>&1
else
    "$NODEWARDEN" "$@" >"$out" 2>&1
fi
rc=$?

case $rc in
    124|137)
        log "nodewarden validate did not finish within ${TIMEOUT}s (exit $rc)"
        rc=3 ;;
    126|127)
        log "cannot run $NODEWARDEN (exit $rc): $(tail -n 1 "$out" | clean)"
        rc=3 ;;
esac

drained=0
case $rc in
    0)
        log "healthy" ;;
    1)
        reason=$(sed -n 's/^DRAIN: //p' "$out" | clean)
        drain "${reason:-nodewarden: validation failed, see $JSON}"
        drained=1 ;;
    2)
        log "usage or configuration error (exit 2): $(grep -v '^DRAIN: ' "$out" | tail -n 3 | tr '\n' ' ')"
        if [ "$DRAIN_ON_USAGE" = 1 ]; then drain "nodewarden: configuration error (exit 2)"; drained=1; fi ;;
    *)
        # nodewarden prints one INCOMPLETE: line per check that could not run (no torch, GPUs that
        # PyTorch cannot use, a disk filled meanwhile); else the output's last lines
        why=$(sed -n 's/^INCOMPLETE: //p' "$out" | clean)
        log "could not complete (exit $rc): ${why:-$(tail -n 3 "$out" | tr '\n' ' ')}"
        if [ "$DRAIN_ON_INCOMPLETE" = 1 ]; then
            drain "nodewarden: validation could not complete (exit $rc)${why:+: $why}"; drained=1
        fi ;;
esac

if [ "$SOFT_EXIT" = 1 ] && [ "$drained" = 0 ]; then
    exit 0
fi
exit "$rc"
