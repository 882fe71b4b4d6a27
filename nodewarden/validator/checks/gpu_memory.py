"""GPU memory: write, read back and compare every byte of GPU memory that can be allocated.

On CUDA, for each visible GPU: ask the driver how much is free (``torch.cuda.mem_get_info``), keep
``reserve_bytes`` back for the compare's temporaries, and allocate the rest in ``chunk_bytes``
pieces (halved on out-of-memory down to ``min_chunk_bytes``). Then, for each pattern, write all of
it, read all of it back and compare *on the device*, one ``slice_bytes`` slice at a time: only the
count of mismatching words crosses to the host, and only when that count is not zero are the first
``max_errors`` failing words fetched. Memory is released on exit, pass or fail.

With ``--device cpu`` (``ctx.compute().device == "cpu"``) the same code runs on a host buffer of
``cpu_buffer_bytes``: that is how the tests exercise it. Without a usable GPU and without
``--device cpu`` the check does not run: ``skip`` on a node without an NVIDIA GPU, ``error`` on
one whose GPUs PyTorch cannot use (:func:`nodewarden.validator.base.resolve_compute`).

Patterns, over the buffer seen as little-endian 64-bit words (``int64``):

* ``address`` -- each word holds its own byte offset from the buffer's start (address-in-address:
  an address line stuck or shorted makes two words hold the same offset);
* ``walking_ones_K`` / ``walking_zeros_K`` -- every word ``1 << K``, then its complement, for each
  K of ``walking_bits`` (a stuck data bit, or one that couples to its neighbour);
* ``random`` -- seeded pseudo-random words; the generator is re-seeded per slice and run again
  for the compare, so the expected data is never stored beside the data under test.

Measured: ``bytes_tested`` and ``bytes_total`` (bytes; on CUDA the GPU's total memory, on CPU the
buffer), ``coverage`` (ratio, held to ``coverage_min_ratio``), ``write_bandwidth`` and
``read_bandwidth`` (B/s, the constant-pattern passes: a plain fill, and a compare that reads every
byte once), ``copy_bandwidth`` (B/s, device-to-device ``copy_``, counted as bytes read plus bytes
written as STREAM and CUDA's bandwidthTest do; held to ``copy_min_bytes_per_second`` on CUDA only,
the profiles' figures are GPU figures) and ``mismatched_words`` (held to 0). A mismatch is status
``fail`` with ``details["errors"]``: offset, address, expected and actual word, flipped bits and
pattern of the first ``max_errors`` failing words. A copy whose destination differs from its
source fails too: ``details["copy_errors"]`` (the same fields, pattern ``copy``, offset and
address of the destination word) and ``details["copy_mismatches"]`` (words, by device). A CUDA
error naming ECC while the memory is tested (an uncorrectable error surfaces so) fails with
``details["cuda_errors"]``; coverage below ``coverage_min_ratio`` (memory held elsewhere, or
that the allocator would not give) fails on the measurement.

Before anything is allocated, NVML is asked whether a GPU must be recovered first (param
``nvml``: ``auto`` does so when the device is CUDA, true/false force it; the NVML snapshot of
:func:`nodewarden.validator.base.nvml_with_timeout`, bounded by ``nvml_timeout_seconds``): a GPU
whose recovery action (field ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``, :mod:`nodewarden.nvml`)
is not ``none`` makes the check ``fail`` at once, the reason naming the GPU (NVML index and PCI
bus id) and the action, ``details["reset_required"]`` listing them; a driver that does not
answer in time fails it too. The actions read are in ``details["recovery_actions"]`` (PCI bus
id -> action, or ``not_supported (...)`` where the driver lacks the field: not a failure).
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from nodewarden.validator.base import (RunContext, check_nvml_params, nvml_enabled, nvml_with_timeout,
                                       reset_required, reset_required_action, reset_required_reason)
from nodewarden.validator.result import ERROR, FAIL, PASS, CheckResult, status_from_measurements

if TYPE_CHECKING:  # torch is imported lazily: the module must import where torch is absent
    import torch

NAME = "gpu_memory"
NEEDS = ("torch",)
MiB = 1 << 20
GiB = 1 << 30
DEFAULTS: dict[str, Any] = {
    "cpu_buffer_bytes": 256 * MiB,   # the buffer tested when the device is the CPU
    "reserve_bytes": 1 * GiB,        # CUDA: left free for the compare's temporaries (about 1.2 x slice)
    "chunk_bytes": 1 * GiB,          # CUDA: allocation unit, halved on out-of-memory
    "min_chunk_bytes": 16 * MiB,     # CUDA: stop allocating below this
    "slice_bytes": 128 * MiB,        # compare granularity (the expected values of one slice)
    "walking_bits": [0, 21, 42, 63],
    "seed": 20240828,
    "coverage_min_ratio": 0.9,
    "copy_bytes": 1 * GiB,           # size of the device-to-device copy (at most half the first chunk)
    "copy_iterations": 10,
    "copy_min_bytes_per_second": 0,  # 0: informational
    "max_errors": 16,                # failing words reported in details["errors"]
    "nvml": "auto",                  # ask NVML for GPUs that must be recovered first: "auto" on CUDA; true/false
    "nvml_timeout_seconds": 30,      # NVML not answering this long fails the check (a hung driver)
}
QUICK: dict[str, Any] = {"cpu_buffer_bytes": 64 * MiB, "walking_bits": [0, 63], "copy_iterations": 5}

_MASK64 = (1 << 64) - 1
Corrupt = Callable[[Any, str], None]  # (buf as passed to run_patterns, pattern name)


def _signed64(v: int) -> int:
    """``v`` (any int) as the signed 64-bit value with the same bits."""
    v &= _MASK64
    return v - (1 << 64) if v >= 1 << 63 else v


# -- patterns --------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Pattern:
    """One pattern over 64-bit words. ``kind`` is ``address``, ``constant`` (every word ``value``)
    or ``random`` (``value`` is the seed). A word's content depends only on its global index, so
    a slice can be written and regenerated for the compare on its own."""

    name: str
    kind: str
    value: int = 0

    def fill(self, dst: "torch.Tensor", first_word: int) -> None:
        """Write the pattern into ``dst`` (1-D int64, words ``first_word ...``) in place."""
        import torch
        n = dst.numel()
        if self.kind == "address":
            torch.arange(first_word * 8, (first_word + n) * 8, 8, dtype=torch.int64, out=dst)
        elif self.kind == "constant":
            dst.fill_(self.value)
        else:
            dst.random_(-(1 << 63), None, generator=self._generator(dst.device, first_word))

    def expected(self, first_word: int, n: int, device: "torch.device") -> "torch.Tensor | int":
        """What words ``first_word .. first_word + n - 1`` must hold: an int for a constant
        pattern, else a fresh int64 tensor of ``n`` words on ``device``."""
        import torch
        if self.kind == "constant":
            return self.value
        out = torch.empty(n, dtype=torch.int64, device=device)
        self.fill(out, first_word)
        return out

    def _generator(self, device: "torch.device", first_word: int) -> "torch.Generator":
        import torch
        g = torch.Generator(device=device)
        g.manual_seed((self.value * 0x9E3779B97F4A7C15 + first_word) & _MASK64)  # per-slice seed
        return g


def make_patterns(walking_bits: Sequence[int], seed: int) -> list[Pattern]:
    """The pattern list in run order: address, walking ones/zeros for each bit, random."""
    out = [Pattern("address", "address")]
    for k in walking_bits:
        out.append(Pattern(f"walking_ones_{k}", "constant", _signed64(1 << k)))
        out.append(Pattern(f"walking_zeros_{k}", "constant", _signed64(~(1 << k))))
    out.append(Pattern("random", "random", seed))
    return out


# -- the write / read / compare pass ---------------------------------------------------------------

@dataclasses.dataclass
class PatternResult:
    """One pattern over the whole buffer: ``bytes`` written and read, the seconds each phase
    took (device synchronised), the count of mismatching words and the first failing ones."""

    name: str
    bytes: int
    write_seconds: float
    read_seconds: float
    mismatches: int
    errors: list[dict[str, Any]]


def _chunks(buf: Any) -> list["torch.Tensor"]:
    """``buf`` (one tensor or a sequence of them) as a list of 1-D contiguous int64 tensors on one
    device. Raises ValueError otherwise."""
    import torch
    chunks = [buf] if isinstance(buf, torch.Tensor) else list(buf)
    if not chunks:
        raise ValueError("empty buffer")
    for c in chunks:
        if c.dtype != torch.int64 or c.dim() != 1 or not c.is_contiguous() or c.device != chunks[0].device:
            raise ValueError("buffer chunks must be 1-D contiguous int64 tensors on one device")
    return chunks


def _slices(chunks: list["torch.Tensor"], slice_words: int) -> Iterator[tuple[int, int, "torch.Tensor", int]]:
    """(chunk index, word offset in the chunk, the slice view, global index of its first word)."""
    base = 0
    for ci, chunk in enumerate(chunks):
        n = chunk.numel()
        for start in range(0, n, slice_words):
            yield ci, start, chunk[start:start + slice_words], base + start
        base += n


def _sync(device: "torch.device") -> None:
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def describe_mismatch(pattern: str, offset: int, address: int, expected: int, actual: int) -> dict[str, Any]:
    """A failing word as reported: ``offset`` (bytes from the buffer's start), ``address`` (the
    word's address: on CUDA the device virtual address from ``data_ptr``), the words as 64-bit
    hex, the flipped ``bits`` (0 = least significant of the little-endian word) and the
    ``byte_offsets`` holding them."""
    flipped = (expected ^ actual) & _MASK64
    bits = [i for i in range(64) if flipped >> i & 1]
    return {"pattern": pattern, "offset": offset, "address": f"0x{address:x}",
            "expected": f"0x{expected & _MASK64:016x}", "actual": f"0x{actual & _MASK64:016x}",
            "bits": bits, "byte_offsets": sorted({offset + b // 8 for b in bits})}


def locate_mismatches(chunks: list["torch.Tensor"], pattern: Pattern, slice_words: int,
                      limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` words that differ from ``pattern``, in address order. Only those words
    (and their indices) are copied to the host."""
    import torch
    found: list[dict[str, Any]] = []
    for ci, start, view, first in _slices(chunks, slice_words):
        exp = pattern.expected(first, view.numel(), view.device)
        idx = torch.nonzero(view != exp).flatten()[:limit - len(found)]
        if idx.numel() == 0:
            continue
        actual = view[idx].tolist()
        wanted = [exp] * len(actual) if isinstance(exp, int) else exp[idx].tolist()
        for i, a, e in zip(idx.tolist(), actual, wanted):
            word = start + i
            found.append(describe_mismatch(pattern.name, (first - start + word) * 8,
                                           chunks[ci].data_ptr() + word * 8, e, a))
        if len(found) >= limit:
            break
    return found


def run_patterns(buf: Any, patterns: Sequence[Pattern], corrupt: Corrupt | None = None, *,
                 slice_bytes: int = DEFAULTS["slice_bytes"], max_errors: int = DEFAULTS["max_errors"],
                 progress: Callable[[int, str], None] | None = None) -> list[PatternResult]:
    """Write each pattern over ``buf``, then read it back and compare on its device.

    ``buf``: a 1-D int64 tensor or a list of them (chunks; offsets run on across chunks).
    ``corrupt(buf, pattern_name)``, when given, is called between the write and the read of every
    pattern: the fault-injection point the tests use. ``progress(i, name)`` after each pattern.
    Returns one :class:`PatternResult` per pattern. Raises ValueError for a malformed buffer.
    """
    import torch
    chunks = _chunks(buf)
    device = chunks[0].device
    slice_words = max(1, slice_bytes // 8)
    nbytes = sum(c.numel() for c in chunks) * 8
    results = []
    for i, pattern in enumerate(patterns):
        _sync(device)
        t0 = time.perf_counter()
        for _, _, view, first in _slices(chunks, slice_words):
            pattern.fill(view, first)
        _sync(device)
        t1 = time.perf_counter()
        if corrupt is not None:
            corrupt(buf, pattern.name)
            _sync(device)
        t2 = time.perf_counter()
        bad = torch.zeros((), dtype=torch.int64, device=device)  # summed on the device: no sync per slice
        for _, _, view, first in _slices(chunks, slice_words):
            bad += torch.count_nonzero(view != pattern.expected(first, view.numel(), device))
        mismatches = int(bad)
        t3 = time.perf_counter()
        errors = locate_mismatches(chunks, pattern, slice_words, max_errors) if mismatches else []
        results.append(PatternResult(pattern.name, nbytes, t1 - t0, t3 - t2, mismatches, errors))
        if progress is not None:
            progress(i, pattern.name)
    return results


# -- allocation and copy ---------------------------------------------------------------------------

def allocate(device: str, target_bytes: int, chunk_bytes: int, min_chunk_bytes: int) -> list["torch.Tensor"]:
    """int64 chunks on ``device`` adding up to at most ``target_bytes``: ``chunk_bytes`` each,
    halving the size after an out-of-memory until it is below ``min_chunk_bytes``."""
    import torch
    chunks: list[torch.Tensor] = []
    remaining, size = target_bytes, chunk_bytes
    floor = min(min_chunk_bytes, target_bytes)  # a buffer smaller than one chunk is still tested
    while remaining >= floor > 0 and size >= floor:
        words = min(size, remaining) // 8
        if words == 0:
            break
        try:
            chunks.append(torch.empty(words, dtype=torch.int64, device=device))
        except torch.OutOfMemoryError:
            size //= 2
            continue
        remaining -= words * 8
    return chunks


def copy_bandwidth(chunk: "torch.Tensor", copy_bytes: int, iterations: int,
                   max_errors: int = DEFAULTS["max_errors"]) -> tuple[float, int, list[dict[str, Any]]]:
    """Device-to-device ``copy_`` from the first half of ``chunk`` into the second (at most
    ``copy_bytes`` each way), ``iterations`` times after one warm-up. Returns (B/s counting bytes
    read plus bytes written, the count of destination words that differ from their source, the
    first ``max_errors`` of them as :func:`describe_mismatch` gives them: pattern ``copy``,
    ``offset`` and ``address`` of the destination word, ``expected`` its source word)."""
    import torch
    words = max(1, min(copy_bytes // 8, chunk.numel() // 2))
    src, dst = chunk[:words], chunk[words:2 * words]
    dst.copy_(src)
    _sync(chunk.device)
    t0 = time.perf_counter()
    for _ in range(iterations):
        dst.copy_(src)
    _sync(chunk.device)
    elapsed = time.perf_counter() - t0
    bps = 2 * words * 8 * iterations / elapsed
    if torch.equal(src, dst):  # no temporaries on the healthy path
        return bps, 0, []
    diff = torch.nonzero(dst != src).flatten()
    found = [describe_mismatch("copy", (words + i) * 8, chunk.data_ptr() + (words + i) * 8, e, a)
             for i, e, a in zip(diff[:max_errors].tolist(), src[diff[:max_errors]].tolist(),
                                dst[diff[:max_errors]].tolist())]
    return bps, int(diff.numel()), found


# -- parameters and the check ----------------------------------------------------------------------

def _int(params: dict[str, Any], key: str, minimum: int) -> int:
    v = params[key]
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ValueError(f"{key} must be an integer >= {minimum} (got {v!r})")
    return v


def checked_params(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` merged over DEFAULTS and validated. Raises ValueError naming the bad key."""
    p = {**DEFAULTS, **params}
    for key in ("cpu_buffer_bytes", "chunk_bytes", "min_chunk_bytes", "slice_bytes", "copy_bytes",
                "copy_iterations", "max_errors"):
        p[key] = _int(p, key, 1)
    p["reserve_bytes"] = _int(p, "reserve_bytes", 0)
    p["seed"] = _int(p, "seed", 0)
    bits = p["walking_bits"]
    if not isinstance(bits, (list, tuple)) or not all(isinstance(k, int) and 0 <= k < 64 for k in bits):
        raise ValueError(f"walking_bits must be a list of integers 0..63 (got {bits!r})")
    for key, hi in (("coverage_min_ratio", 1.0), ("copy_min_bytes_per_second", float("inf"))):
        if not isinstance(p[key], (int, float)) or not 0 <= p[key] <= hi:
            raise ValueError(f"{key} must be a number in [0, {hi}] (got {p[key]!r})")
    check_nvml_params(p)
    return p


def recovery_precheck(p: dict[str, Any], device: str) -> tuple[CheckResult | None, dict[str, str] | None]:
    """The NVML pre-check (module docstring): (a ``fail`` result when a GPU must be recovered
    first or NVML hangs, else None; the actions read by PCI bus id, None when NVML was not asked
    or is not there). ``device``: the run's compute device (``cuda``/``cpu``). Never raises."""
    if not nvml_enabled(p["nvml"], device == "cuda"):
        return None, None
    gpus, why, faulted = nvml_with_timeout(float(p["nvml_timeout_seconds"]))
    if faulted:
        return CheckResult(NAME, FAIL, reason=why, device=device,
                           action="drain the node; check the driver (dmesg for Xid, nvidia-smi) and reset the GPUs",
                           details={"nvml": why}), None
    actions = _actions(gpus) if gpus is not None else None
    bad = reset_required(gpus or [])
    if bad:
        return CheckResult(NAME, FAIL, reason=reset_required_reason(bad), action=reset_required_action(bad),
                           device=device, details={"reset_required": bad, "recovery_actions": actions}), actions
    return None, actions


def _actions(gpus: list[dict[str, Any]] | None) -> dict[str, str]:
    return {g.get("pci") or f"GPU{g['index']}": g["recovery_action"] or g["recovery_action_read"]
            for g in gpus or []}


def _test_device(device: str, p: dict[str, Any], result: CheckResult, ctx: RunContext,
                 corrupt: Corrupt | None) -> None:
    """Allocate, run the patterns and the copy on one device, add its measurements and errors."""
    import torch
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info(device)
        target = max(0, free - p["reserve_bytes"])
    else:
        total = target = p["cpu_buffer_bytes"]
    patterns = make_patterns(p["walking_bits"], p["seed"])

    def progress(i: int, name: str) -> None:
        ctx.progress(NAME, (i + 1) / (len(patterns) + 1), f"{device} {name}")

    chunks = allocate(device, target, p["chunk_bytes"], p["min_chunk_bytes"])
    runs: list[PatternResult] = []
    copy_bps: float | None = None
    copy_bad: tuple[int, list[dict[str, Any]]] = (0, [])
    tested = sum(c.numel() for c in chunks) * 8
    try:
        if chunks:  # none at all: coverage 0 says so
            runs = run_patterns(chunks, patterns, corrupt, slice_bytes=p["slice_bytes"],
                                max_errors=p["max_errors"], progress=progress)
            copy_bps, *copy_bad = copy_bandwidth(chunks[0], p["copy_bytes"], p["copy_iterations"], p["max_errors"])
    finally:
        del chunks
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    _report(device, runs, tested, total, copy_bps, copy_bad, p, result)


def _report(device: str, runs: list[PatternResult], tested: int, total: int, copy_bps: float | None,
            copy_bad: tuple[int, list[dict[str, Any]]], p: dict[str, Any], result: CheckResult) -> None:
    const = [r for r in runs if r.name.startswith("walking_")] or runs
    write_s = sum(r.write_seconds for r in const)
    read_s = sum(r.read_seconds for r in const)
    mismatches = sum(r.mismatches for r in runs)
    gpu = device.startswith("cuda")
    result.measure("bytes_tested", tested, "bytes", device=device)
    result.measure("bytes_total", total, "bytes", device=device)
    result.measure("coverage", round(tested / total, 4) if total else 0.0, "ratio",
                   threshold=p["coverage_min_ratio"], device=device)
    result.measure("write_bandwidth", sum(r.bytes for r in const) / write_s if write_s else None, "B/s", device=device)
    result.measure("read_bandwidth", sum(r.bytes for r in const) / read_s if read_s else None, "B/s", device=device)
    copy_min = p["copy_min_bytes_per_second"]
    result.measure("copy_bandwidth", copy_bps, "B/s", threshold=copy_min if gpu and copy_min > 0 else None,
                   device=device)
    result.measure("mismatched_words", mismatches, "words", threshold=0, op="<=", device=device)
    errors = result.details.setdefault("errors", [])
    for r in runs:
        for e in r.errors[:max(0, p["max_errors"] - len(errors))]:
            errors.append({"device": device, **e})
    result.details.setdefault("mismatches", {})[device] = {r.name: r.mismatches for r in runs if r.mismatches}
    if copy_bad[0]:
        result.details.setdefault("copy_errors", []).extend({"device": device, **e} for e in copy_bad[1])
        result.details.setdefault("copy_mismatches", {})[device] = copy_bad[0]


def _verdict(result: CheckResult) -> None:
    """Status, reason and action from the measurements and errors gathered."""
    result.status = status_from_measurements(result.measurements)
    if any(result.details.get(k) for k in ("errors", "copy_errors", "cuda_errors")):
        result.status = FAIL
    if result.status == PASS:
        tested = sum(m.value for m in result.measurements if m.name == "bytes_tested")
        result.reason = f"{tested / GiB:.3g} GiB written, read back and compared: no mismatch"
        return
    if result.details.get("cuda_errors"):
        e = result.details["cuda_errors"][0]
        result.reason = f"{e['device']}: {e['error'][:200]}"
        result.action = "drain the node; check nvidia-smi -q -d ECC,ROW_REMAPPER and the Xid log"
    elif result.details.get("errors"):
        e = result.details["errors"][0]
        n = sum(m.value for m in result.measurements if m.name == "mismatched_words")
        result.reason = (f"{n} mismatching 64-bit words; first on {e['device']} at offset {e['offset']:#x} "
                         f"({e['address']}) pattern {e['pattern']}: bits {e['bits']} flipped")
        result.action = ("drain the node; check ECC and row remapping (nvidia-smi -q -d ECC,ROW_REMAPPER) "
                         "and run the vendor's memory diagnostic (dcgmi diag -r 3)")
    elif result.details.get("copy_errors"):
        e = result.details["copy_errors"][0]
        n = sum(result.details["copy_mismatches"].values())
        result.reason = (f"device-to-device copy corrupted {n} 64-bit word(s) on "
                         f"{', '.join(result.details['copy_mismatches'])}; first on {e['device']} at offset "
                         f"{e['offset']:#x} ({e['address']}): bits {e['bits']} flipped")
        result.action = "drain the node and run the vendor's memory diagnostic (dcgmi diag -r 3)"
    else:
        bad = [f"{m.name}@{m.device} {m.value:.3g} (need {m.op} {m.threshold:.3g})" for m in result.measurements
               if m.ok() is False]
        result.reason = "; ".join(bad)
        result.action = ("coverage: free the GPUs (nvidia-smi shows who holds memory) and rerun; "
                         "bandwidth: check clocks, throttling and the HBM (nvidia-smi -q -d PERFORMANCE)")


def run(ctx: RunContext, params: dict[str, Any], corrupt: Corrupt | None = None) -> CheckResult:
    """Test the memory of every visible GPU (or ``cpu_buffer_bytes`` of host memory when the run's
    device is ``cpu``); ``skip``/``error`` without a device (:meth:`RunContext.compute`).
    ``corrupt`` is the fault-injection hook passed on to :func:`run_patterns`."""
    try:
        p = checked_params(params)
    except ValueError as e:
        return CheckResult(NAME, ERROR, reason=f"invalid parameter: {e}",
                           action="fix [gpu_memory] in the config file or the --set value")
    compute = ctx.compute()
    if compute.device is None:  # no device to test: never a pass
        return CheckResult(NAME, compute.status or ERROR, reason=compute.reason, action=compute.action)
    ctx.progress(NAME, 0.0, "nvml recovery action")
    pre, actions = recovery_precheck(p, compute.device)
    if pre is not None:  # fail fast: nothing allocated on a GPU the driver says must be recovered
        return pre
    import torch
    result = CheckResult(NAME, PASS, device=compute.device)
    if actions is not None:
        result.details["recovery_actions"] = actions
    if compute.device == "cuda":
        devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        if not devices:  # nothing written: "0 GiB compared" is no pass
            return CheckResult(NAME, ERROR, reason="no CUDA device visible to PyTorch", device="cuda")
    else:
        devices = ["cpu"]
    for device in devices:
        try:
            _test_device(device, p, result, ctx, corrupt)
        except RuntimeError as e:
            if "ECC" not in str(e):  # an uncorrectable ECC error surfaces as a CUDA error: a finding
                raise
            result.details.setdefault("cuda_errors", []).append({"device": device, "error": str(e)[:300]})
    _verdict(result)
    return result
