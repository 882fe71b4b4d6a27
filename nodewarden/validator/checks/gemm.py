"""GEMM: matrix products in every dtype the device supports, timed and checked, with GPU memory
nearly full.

On CUDA, for each visible GPU in turn: a ballast tensor first fills memory so that about
``fill_ratio`` of it is in use during the products (a GPU whose HBM or power delivery fails under
load fails here, not in the middle of a training job). Then, per dtype (``fp32``; ``tf32`` -- fp32
with TF32 tensor cores allowed, Ampere and later; ``bf16``; ``fp16``), seeded ``n`` x ``n``
inputs, one checked product and up to ``iterations`` timed ones within ``seconds``. On the CPU
device the same code runs without ballast, in fp32, bf16 and (where the build supports it) fp16.

Each checked product is held three ways:

* **sampled tiles** -- ``tiles`` tiles of ``tile`` x ``tile`` elements recomputed in float64 from the
  same inputs;
* **ABFT checksums** (Huang & Abraham 1984) -- column sums of C against (column sums of A) @ B and
  row sums of C against A @ (row sums of B), all in float64. A corrupted element shows in one row
  sum and one column sum; each (row, column) pair so flagged is recomputed in float64 and the
  elements that really are wrong are reported at (row, col);
* **bitwise consensus** -- on a node with several GPUs of one model, the same seeded product must
  have the same bits on all of them (a checksum of the raw bytes is compared); a GPU that differs
  from the majority is named. cuBLAS promises bitwise-reproducible results across GPUs of one
  architecture and SM count (cuBLAS documentation, "Results reproducibility"), so GPUs are grouped
  by product name. Every GPU must also reproduce its own product bit for bit after the timed runs.

Tolerance (``error_bounds``), with k the inner dimension and s = ``tolerance_scale``. Element (i, j)::

    |C_ij - ref_ij| <= s * (u_out * |ref_ij| + (2 * u_in + LAMBDA * sqrt(k) * U_ACC) * ||A_i,:|| * ||B_:,j||)

``u_out`` is one unit in the last place of the output type (fp32 2^-23, bf16 2^-7, fp16 2^-10): it
bounds the final rounding whether to nearest or toward zero (tensor cores truncate: Fasi, Higham,
Mikaitis & Pranesh 2021, "Numerical behavior of NVIDIA tensor cores"). ``u_in`` is TF32's input
rounding (2^-10 relative per operand, so 2 u_in per product; 0 where the inputs are used as
stored). The accumulation term is Higham & Mary's probabilistic bound (2019, "A new approach to
probabilistic rounding error analysis"): a k-term accumulation errs by at most LAMBDA sqrt(k) u
times the sum of |a_il b_lj|, which Cauchy-Schwarz bounds by the 2-norms; LAMBDA = 8, U_ACC =
2^-23 (an fp32 accumulator, either rounding). bf16/fp16 split-K reductions in reduced precision
are turned off for these products so that the accumulator really is fp32.

A column checksum adds m centred, independent element errors; by Hoeffding's inequality the sum
stays within LAMBDA times their root-sum-square (exceeded with probability below 2 exp(-LAMBDA^2/2)
= 3e-14), and the norms give that root-sum-square without forming |A| |B|::

    |sum_i C_ij - ((1^T A) B)_j|
        <= s * LAMBDA * (u_out * ||C_:,j|| + (2 * u_in + sqrt(k) * U_ACC) * ||A||_F * ||B_:,j||)

(||C_:,j|| from C itself, capped by ||A||_F ||B_:,j|| so that a corrupted element cannot widen its
own bound); rows likewise. What this catches: on n = 8192 randn inputs (|C_ij| ~ 90) a checksum
sees an element off by more than about 64 (fp32) or 580 (bf16): sign and exponent flips of large
elements; a sampled tile sees an element off by about 2 ulp; the bitwise consensus sees any bit.
On this design's CPU tests healthy products reach ``max_error_ratio`` (largest residual /
tolerance) of about 0.02 in fp32 and 0.5 in bf16/fp16, where the output rounding fills half an ulp.

Measured per device: ``{dtype}_flops`` (FLOP/s, 2 n^3 per product; held to
``{dtype}_min_flop_per_second`` when that is > 0 and the device is a GPU: the profiles' figures
are GPU figures), ``max_error_ratio`` (largest residual / tolerance, must stay <= 1) and, on CUDA,
``memory_used_ratio`` during the products.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
import warnings
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, Iterator

from nodewarden.validator.base import RunContext
from nodewarden.validator.result import ERROR, FAIL, PASS, CheckResult, status_from_measurements

if TYPE_CHECKING:  # torch is imported lazily: the module must import where torch is absent
    import torch

NAME = "gemm"
NEEDS = ("torch",)
MODE_NAMES = ("fp32", "tf32", "bf16", "fp16")
DEFAULTS: dict[str, Any] = {
    "n": 8192,              # matrix size on CUDA (n x n times n x n)
    "cpu_n": 1024,          # matrix size on the CPU device
    "iterations": 20,       # timed products per dtype per device, at most
    "seconds": 2.0,         # and at most this long (at least one product is timed)
    "dtypes": list(MODE_NAMES),
    "fill_ratio": 0.9,      # CUDA: fraction of GPU memory in use during the products
    "tiles": 4,             # sampled tiles recomputed in float64
    "tile": 128,            # tile edge (elements)
    "seed": 20240828,
    "tolerance_scale": 1.0,
    **{f"{m}_min_flop_per_second": 0 for m in MODE_NAMES},  # 0: informational
}
QUICK: dict[str, Any] = {"n": 4096, "cpu_n": 512, "iterations": 10, "seconds": 1.0}

LAMBDA = 8.0        # Higham-Mary probabilistic bound: lambda * sqrt(k) * u
U_ACC = 2.0 ** -23  # fp32 accumulator, one ulp (covers round-toward-zero)
Corrupt = Callable[["torch.Tensor", str, str], None]  # (C, dtype name, device)


@dataclasses.dataclass(frozen=True)
class Mode:
    """A math mode: the storage dtype (torch attribute name), the input rounding the hardware
    applies (``u_in``) and one ulp of the output type (``u_out``)."""

    name: str
    dtype: str
    u_in: float
    u_out: float


MODES = {
    "fp32": Mode("fp32", "float32", 0.0, 2.0 ** -23),
    "tf32": Mode("tf32", "float32", 2.0 ** -10, 2.0 ** -23),
    "bf16": Mode("bf16", "bfloat16", 0.0, 2.0 ** -7),
    "fp16": Mode("fp16", "float16", 0.0, 2.0 ** -10),
}


@dataclasses.dataclass(frozen=True)
class Bounds:
    """Tolerance factors for a product with inner dimension k (see the module docstring).

    ``element``: (on |ref_ij|, on ||A_i,:|| ||B_:,j||); ``checksum``: (on ||C_:,j||, on
    ||A||_F ||B_:,j||) for a column sum, and likewise for a row sum."""

    element: tuple[float, float]
    checksum: tuple[float, float]


def error_bounds(mode: Mode, k: int, scale: float = 1.0) -> Bounds:
    """The tolerance factors of ``mode`` for inner dimension ``k``, times ``scale``."""
    acc = math.sqrt(k) * U_ACC
    return Bounds(element=(scale * mode.u_out, scale * (2 * mode.u_in + LAMBDA * acc)),
                  checksum=(scale * LAMBDA * mode.u_out, scale * LAMBDA * (2 * mode.u_in + acc)))


def mode_for(t: "torch.Tensor") -> Mode:
    """The plain mode of a tensor's dtype (fp32 for float32: pass ``tf32`` explicitly)."""
    for m in MODES.values():
        if m.name != "tf32" and str(t.dtype) == f"torch.{m.dtype}":
            return m
    raise ValueError(f"no GEMM mode for dtype {t.dtype}")


# -- checking one product ------------------------------------------------------------------------

@dataclasses.dataclass
class ProductCheck:
    """What :func:`check_product` found. ``located``: elements (row, col) that both checksums
    flag and a float64 recomputation confirms wrong, with expected/actual; ``rows``/``cols``: the
    checksums that disagree; ``tile_errors``: sampled elements outside the bound; the ratios:
    largest residual / tolerance (below 1 when healthy)."""

    located: list[dict[str, Any]]
    rows: list[int]
    cols: list[int]
    tile_errors: list[dict[str, Any]]
    abft_ratio: float
    tile_ratio: float

    @property
    def ok(self) -> bool:
        return not (self.located or self.rows or self.cols or self.tile_errors)

    @property
    def positions(self) -> list[tuple[int, int]]:
        return [(e["row"], e["col"]) for e in self.located]


def _f64_vec_mat(v: "torch.Tensor", b: "torch.Tensor", block_bytes: int = 32 << 20) -> "torch.Tensor":
    """``v @ b`` in float64 (v: (k,) float64; b: (k, n) any dtype), converting ``b`` a block of
    rows at a time so no float64 copy of ``b`` is made."""
    import torch
    step = max(1, block_bytes // (8 * b.shape[1]))
    out = torch.zeros(b.shape[1], dtype=torch.float64, device=b.device)
    for s in range(0, b.shape[0], step):
        out += v[s:s + step] @ b[s:s + step].double()
    return out


def _f64_mat_vec(a: "torch.Tensor", w: "torch.Tensor", block_bytes: int = 32 << 20) -> "torch.Tensor":
    """``a @ w`` in float64 (a: (m, k) any dtype; w: (k,) float64), a block of rows at a time."""
    import torch
    step = max(1, block_bytes // (8 * a.shape[1]))
    return torch.cat([a[s:s + step].double() @ w for s in range(0, a.shape[0], step)])


def tile_origins(rows: int, cols: int, count: int, size: int, seed: int) -> list[tuple[int, int]]:
    """Top-left corners of ``count`` tiles of ``size`` x ``size`` (clipped to the matrix), seeded:
    the first tile is always at (0, 0) so that a partial-tile bug is seen at once."""
    import torch
    g = torch.Generator().manual_seed(seed)
    out = [(0, 0)] if count > 0 else []
    for _ in range(count - 1):
        r = int(torch.randint(0, max(1, rows - size + 1), (1,), generator=g))
        c = int(torch.randint(0, max(1, cols - size + 1), (1,), generator=g))
        out.append((r, c))
    return out


def _flagged(residual: "torch.Tensor", tol: "torch.Tensor", limit: int) -> tuple[list[int], float]:
    """Indices where |residual| > tol (NaN counts as flagged), and the largest ratio."""
    import torch
    err = residual.abs()
    bad = ~(err <= tol)
    ratio = torch.where(tol > 0, err / tol, torch.where(err > 0, math.inf, 0.0))  # 0/0: exact, fine
    ratio = torch.nan_to_num(ratio, nan=math.inf).max() if ratio.numel() else torch.zeros(())
    return torch.nonzero(bad).flatten()[:limit].tolist(), float(ratio)


def check_product(a: "torch.Tensor", b: "torch.Tensor", c: "torch.Tensor", mode: Mode | str | None = None, *,
                  tiles: int = 4, tile: int = 128, seed: int = 0, tolerance_scale: float = 1.0,
                  max_errors: int = 16) -> ProductCheck:
    """Check ``c`` == ``a @ b`` (a: (m, k), b: (k, n), c: (m, n), on one device, any float dtype)
    by sampled float64 tiles and row/column checksums. ``mode`` (a :class:`Mode` or its name)
    says how the product was computed; default: the plain mode of ``c``'s dtype. Returns a
    :class:`ProductCheck`; raises ValueError for mismatched shapes."""
    import torch
    if a.dim() != 2 or b.dim() != 2 or c.shape != (a.shape[0], b.shape[1]) or a.shape[1] != b.shape[0]:
        raise ValueError(f"shapes do not make a product: {tuple(a.shape)} @ {tuple(b.shape)} -> {tuple(c.shape)}")
    mode = MODES[mode] if isinstance(mode, str) else (mode or mode_for(c))
    f64 = torch.float64
    bounds = error_bounds(mode, a.shape[1], tolerance_scale)
    eps_out, eps_norm = bounds.element
    sum_out, sum_norm = bounds.checksum
    a_rows = torch.linalg.vector_norm(a, dim=1, dtype=f64)   # ||A_i,:||, (m,)
    b_cols = torch.linalg.vector_norm(b, dim=0, dtype=f64)   # ||B_:,j||, (n,)
    a_fro, b_fro = torch.linalg.vector_norm(a_rows), torch.linalg.vector_norm(b_cols)
    # ||C_:,j|| from c itself, but never above its exact bound ||A||_F ||B_:,j||: a corrupted
    # (huge, inf, NaN) element must not widen its own tolerance
    c_cols = torch.fmin(torch.linalg.vector_norm(c, dim=0, dtype=f64), a_fro * b_cols)
    c_rows = torch.fmin(torch.linalg.vector_norm(c, dim=1, dtype=f64), a_rows * b_fro)
    col_res = c.sum(0, dtype=f64) - _f64_vec_mat(a.sum(0, dtype=f64), b)
    row_res = c.sum(1, dtype=f64) - _f64_mat_vec(a, b.sum(1, dtype=f64))
    cols, col_ratio = _flagged(col_res, sum_out * c_cols + sum_norm * a_fro * b_cols, max_errors)
    rows, row_ratio = _flagged(row_res, sum_out * c_rows + sum_norm * a_rows * b_fro, max_errors)
    located = []
    for i in rows:
        for j in cols:
            ref = float(a[i].double() @ b[:, j].double())
            got = float(c[i, j])
            tol = eps_out * abs(ref) + eps_norm * float(a_rows[i] * b_cols[j])
            if not abs(got - ref) <= tol:
                located.append({"row": i, "col": j, "expected": ref, "actual": got, "tolerance": tol})
    tile_errors, tile_ratio = [], 0.0
    for r0, c0 in tile_origins(c.shape[0], c.shape[1], tiles, tile, seed):
        ref = a[r0:r0 + tile].double() @ b[:, c0:c0 + tile].double()
        got = c[r0:r0 + tile, c0:c0 + tile].double()
        tol = eps_out * ref.abs() + eps_norm * a_rows[r0:r0 + tile, None] * b_cols[None, c0:c0 + tile]
        idx, ratio = _flagged((got - ref).flatten(), tol.flatten(), max_errors - len(tile_errors))
        tile_ratio = max(tile_ratio, ratio)
        w = ref.shape[1]
        for f in idx:
            tile_errors.append({"row": r0 + f // w, "col": c0 + f % w, "expected": float(ref.flatten()[f]),
                                "actual": float(got.flatten()[f]), "tolerance": float(tol.flatten()[f])})
    return ProductCheck(located, rows, cols, tile_errors, max(col_ratio, row_ratio), tile_ratio)


# -- bitwise consensus ------------------------------------------------------------------------------

def digest(t: "torch.Tensor", block_elements: int = 1 << 22) -> str:
    """A checksum of ``t``'s raw bytes, computed on its device: the wrap-around (mod 2^64) sums of
    the bit patterns and of the bit patterns times a position weight. Integer sums do not depend
    on the order of the reduction, so equal bytes give equal digests on any device."""
    import torch
    size = t.element_size()
    bits = t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]).flatten()
    mask = (1 << (8 * size)) - 1 if size < 8 else -1
    plain = torch.zeros((), dtype=torch.int64, device=t.device)
    weighted = torch.zeros((), dtype=torch.int64, device=t.device)
    for s in range(0, bits.numel(), block_elements):
        x = bits[s:s + block_elements].to(torch.int64) & mask
        w = (torch.arange(s, s + x.numel(), dtype=torch.int64, device=t.device) * 40503 + 1) % 2147483647
        plain += x.sum()
        weighted += (x * w if size < 8 else x ^ w).sum()
    return f"{str(t.dtype)[6:]}{list(t.shape)}:{int(plain) & (2**64 - 1):016x}{int(weighted) & (2**64 - 1):016x}"


def consensus(digests: dict[str, str]) -> tuple[str | None, list[str]]:
    """(the majority digest or None, devices that differ from it). Without a strict majority
    every device is listed: which one is wrong cannot be told."""
    if not digests:
        return None, []
    value, votes = Counter(digests.values()).most_common(1)[0]
    if votes * 2 <= len(digests) and len(digests) > 1:
        return None, sorted(digests)
    return value, sorted(d for d, v in digests.items() if v != value)


# -- running on a device --------------------------------------------------------------------------

@contextlib.contextmanager
def math_mode(mode: Mode) -> Iterator[None]:
    """cuBLAS settings for ``mode``, restored on exit: TF32 tensor cores only for ``tf32``, and no
    reduced-precision (bf16/fp16) split-K reductions, so the accumulator is fp32 as the bound
    assumes. No effect on the CPU."""
    import torch
    m = torch.backends.cuda.matmul
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TF32 API is being renamed: either spelling works
        new_api = hasattr(m, "fp32_precision")
        saved = (m.fp32_precision if new_api else m.allow_tf32, m.allow_bf16_reduced_precision_reduction,
                 m.allow_fp16_reduced_precision_reduction)
        try:
            if new_api:
                m.fp32_precision = "tf32" if mode.name == "tf32" else "ieee"
            else:
                m.allow_tf32 = mode.name == "tf32"
            m.allow_bf16_reduced_precision_reduction = False
            m.allow_fp16_reduced_precision_reduction = False
            yield
        finally:
            if new_api:
                m.fp32_precision = saved[0]
            else:
                m.allow_tf32 = saved[0]
            m.allow_bf16_reduced_precision_reduction, m.allow_fp16_reduced_precision_reduction = saved[1:]


def supported_modes(device: str, wanted: list[str]) -> tuple[list[Mode], dict[str, str]]:
    """The modes of ``wanted`` the device runs, and {mode: why not} for the others."""
    import torch
    ok, skipped = [], {}
    for name in wanted:
        mode = MODES[name]
        why = None
        if device.startswith("cuda"):
            major = torch.cuda.get_device_capability(device)[0]
            if name == "tf32" and major < 8:
                why = "TF32 needs compute capability 8.0 (Ampere) or later"
            elif name == "bf16" and major < 8:
                why = "bf16 tensor cores need compute capability 8.0 (Ampere) or later"
        elif name == "tf32":
            why = "TF32 is a CUDA tensor-core mode"
        else:
            try:
                x = torch.ones(2, 2, dtype=getattr(torch, mode.dtype))
                torch.matmul(x, x)
            except RuntimeError as e:
                why = f"matmul in {name} not supported on this CPU build: {e}"
        if why:
            skipped[name] = why
        else:
            ok.append(mode)
    return ok, skipped


def _sync(device: str) -> None:
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def make_inputs(n: int, mode: Mode, device: str, seed: int) -> tuple["torch.Tensor", "torch.Tensor"]:
    """Seeded N(0, 1) n x n inputs A, B in ``mode``'s dtype, generated on ``device`` (the same
    seed gives the same bits on every GPU of one model)."""
    import torch
    g = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, mode.dtype)
    return (torch.randn(n, n, generator=g, device=device, dtype=dt),
            torch.randn(n, n, generator=g, device=device, dtype=dt))


def time_products(a: "torch.Tensor", b: "torch.Tensor", c: "torch.Tensor", iterations: int, seconds: float) -> float:
    """FLOP/s of ``torch.matmul(a, b, out=c)`` (2 m n k per product) over up to ``iterations``
    products within ``seconds`` (at least one), each synchronised."""
    import torch
    device = str(c.device)
    _sync(device)
    t0 = time.perf_counter()
    done = 0
    while done < iterations and (done == 0 or time.perf_counter() - t0 < seconds):
        torch.matmul(a, b, out=c)
        _sync(device)
        done += 1
    return 2 * a.shape[0] * a.shape[1] * b.shape[1] * done / (time.perf_counter() - t0)


def allocate_ballast(device: str, fill_ratio: float, workspace_bytes: int) -> "torch.Tensor | None":
    """A filled uint8 tensor on a CUDA ``device`` sized so that ``fill_ratio`` of its memory is in
    use once ``workspace_bytes`` more are taken; halved on out-of-memory; None when nothing fits."""
    import torch
    free, total = torch.cuda.mem_get_info(device)
    want = int(fill_ratio * total) - (total - free) - workspace_bytes
    while want >= 64 << 20:
        try:
            t = torch.empty(want, dtype=torch.uint8, device=device)
            t.fill_(0xA5)
            return t
        except torch.OutOfMemoryError:
            want //= 2
    return None


def _run_mode(device: str, mode: Mode, n: int, p: dict[str, Any], corrupt: Corrupt | None) -> dict[str, Any]:
    """One dtype on one device: checked product, digests, timing. Returns a record."""
    import torch
    a, b = make_inputs(n, mode, device, p["seed"])
    c = torch.empty_like(a)
    with math_mode(mode):
        torch.matmul(a, b, out=c)
        _sync(device)
        used = None
        if device.startswith("cuda"):
            free, total = torch.cuda.mem_get_info(device)
            used = (total - free) / total
        if corrupt is not None:
            corrupt(c, mode.name, device)
        check = check_product(a, b, c, mode, tiles=p["tiles"], tile=p["tile"], seed=p["seed"],
                              tolerance_scale=p["tolerance_scale"])
        first = digest(c)
        flops = time_products(a, b, c, p["iterations"], p["seconds"])
        last = digest(c)
    return {"mode": mode.name, "check": check, "digest": first, "repeatable": first == last,
            "flops": flops, "memory_used_ratio": used}


def progress_of(record: dict[str, Any]) -> str:
    """What one finished mode adds to a progress line: its dtype and measured rate, in
    TFLOP/s (``record["flops"]``, FLOP/s from :func:`time_products`)."""
    return f"{record['mode']} {record['flops'] / 1e12:.3g} TFLOP/s"


def _run_device(device: str, n: int, modes: list[Mode], p: dict[str, Any], progress: Callable[..., None],
                corrupt: Corrupt | None) -> list[dict[str, Any]]:
    """All modes on one device, with the ballast held (CUDA) for the whole of it."""
    import torch
    ballast = None
    try:
        if device.startswith("cuda"):
            ballast = allocate_ballast(device, p["fill_ratio"], 6 * n * n * 4 + (512 << 20))  # A, B, C, f64 casts
        records: list[dict[str, Any]] = []
        for mode in modes:
            progress(f"{device} {mode.name} n={n}" + (f"; {progress_of(records[-1])}" if records else ""))
            records.append(_run_mode(device, mode, n, p, corrupt))
        if records:
            progress(f"{device} done; {progress_of(records[-1])}", False)
        return records
    finally:
        del ballast
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


def checked_params(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` merged over DEFAULTS and validated. Raises ValueError naming the bad key."""
    p = {**DEFAULTS, **params}
    for key in ("n", "cpu_n", "iterations", "tiles", "tile"):
        v = p[key]
        if isinstance(v, float) and v.is_integer():
            v = p[key] = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{key} must be an integer >= 1 (got {v!r})")
    for key, lo, hi in (("seconds", 0.0, math.inf), ("fill_ratio", 0.0, 0.99), ("tolerance_scale", 1e-3, 1e6),
                        *((f"{m}_min_flop_per_second", 0.0, math.inf) for m in MODE_NAMES)):
        if isinstance(p[key], bool) or not isinstance(p[key], (int, float)) or not lo <= p[key] <= hi:
            raise ValueError(f"{key} must be a number in [{lo}, {hi}] (got {p[key]!r})")
    if not isinstance(p["dtypes"], (list, tuple)) or not set(p["dtypes"]) <= set(MODE_NAMES) or not p["dtypes"]:
        raise ValueError(f"dtypes must be a non-empty list of {', '.join(MODE_NAMES)} (got {p['dtypes']!r})")
    if not isinstance(p["seed"], int) or p["seed"] < 0:
        raise ValueError(f"seed must be an integer >= 0 (got {p['seed']!r})")
    return p


def _errors_of(device: str, rec: dict[str, Any]) -> list[dict[str, Any]]:
    chk: ProductCheck = rec["check"]
    out = [{"device": device, "dtype": rec["mode"], "kind": "abft", **e} for e in chk.located]
    out += [{"device": device, "dtype": rec["mode"], "kind": "tile", **e} for e in chk.tile_errors]
    if (chk.rows or chk.cols) and not chk.located:
        out.append({"device": device, "dtype": rec["mode"], "kind": "checksum", "rows": chk.rows, "cols": chk.cols})
    if not rec["repeatable"]:
        out.append({"device": device, "dtype": rec["mode"], "kind": "repeat",
                    "detail": "the same product gave different bits after the timed runs"})
    return out


def _record(result: CheckResult, device: str, records: list[dict[str, Any]], p: dict[str, Any]) -> None:
    gpu = device.startswith("cuda")
    worst = 0.0
    for rec in records:
        floor = p[f"{rec['mode']}_min_flop_per_second"]
        result.measure(f"{rec['mode']}_flops", rec["flops"], "FLOP/s", threshold=floor if gpu and floor > 0 else None,
                       device=device)
        worst = max(worst, rec["check"].abft_ratio, rec["check"].tile_ratio)
        result.details.setdefault("errors", []).extend(_errors_of(device, rec))
        result.details.setdefault("products", {}).setdefault(device, {})[rec["mode"]] = {
            "digest": rec["digest"], "abft_ratio": round(rec["check"].abft_ratio, 6),
            "tile_ratio": round(rec["check"].tile_ratio, 6)}
    result.measure("max_error_ratio", round(worst, 6) if math.isfinite(worst) else worst, "ratio", threshold=1.0,
                   op="<=", device=device)
    used = [r["memory_used_ratio"] for r in records if r["memory_used_ratio"] is not None]
    if used:
        result.measure("memory_used_ratio", round(min(used), 4), "ratio", device=device)


def _consensus_errors(groups: dict[str, list[str]], products: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Bitwise consensus per GPU model and dtype."""
    out = []
    for model, devices in groups.items():
        if len(devices) < 2:
            continue
        for mode in MODE_NAMES:
            digests = {d: products[d][mode]["digest"] for d in devices if mode in products.get(d, {})}
            majority, differ = consensus(digests)
            for d in differ:
                out.append({"device": d, "dtype": mode, "kind": "consensus", "model": model,
                            "digest": digests[d], "majority": majority})
    return out


def run(ctx: RunContext, params: dict[str, Any], corrupt: Corrupt | None = None,
        devices: list[str] | None = None) -> CheckResult:
    """Products on every visible GPU, or on the CPU when the run's device is ``cpu`` (asked for
    with ``--device cpu``); ``skip``/``error`` without a device (:meth:`RunContext.compute`).
    Test hooks, never set by the runner: ``corrupt(c, dtype, device)``, called on each checked
    product before it is checked; ``devices``, the torch devices to test instead (on the CPU
    device several of ``cpu:0``, ``cpu:1``... stand in for GPUs of one model, so that the bitwise
    consensus runs)."""
    try:
        p = checked_params(params)
    except ValueError as e:
        return CheckResult(NAME, ERROR, reason=f"invalid parameter: {e}",
                           action="fix [gemm] in the config file or the --set value")
    compute = ctx.compute()
    if compute.device is None:  # no device to test: never a pass
        return CheckResult(NAME, compute.status or ERROR, reason=compute.reason, action=compute.action)
    import torch
    result = CheckResult(NAME, PASS, device=compute.device)
    if compute.device == "cuda":
        devices = devices or [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        n = p["n"]
        if not devices:
            return CheckResult(NAME, ERROR, reason="no CUDA device visible to PyTorch", device="cuda")
    else:
        devices, n = devices or ["cpu"], p["cpu_n"]
    plan = {d: supported_modes(d, list(p["dtypes"])) for d in devices}
    total = sum(len(m) for m, _ in plan.values()) or 1
    started = [0]

    def progress(text: str, starts: bool = True) -> None:
        """A progress line; ``starts``: a mode starts (it counts towards the share done after it)."""
        ctx.progress(NAME, started[0] / total, text)
        started[0] += starts

    for device in devices:
        modes, skipped = plan[device]
        if skipped:
            result.details.setdefault("skipped", {})[device] = skipped
        _record(result, device, _run_device(device, n, modes, p, progress, corrupt), p)
    groups: dict[str, list[str]] = {}
    for d in devices:
        groups.setdefault(torch.cuda.get_device_name(d) if d.startswith("cuda") else "cpu", []).append(d)
    products = result.details.get("products", {})
    result.details["errors"] = result.details.get("errors", []) + _consensus_errors(groups, products)
    result.details["n"] = n
    _verdict(result)
    return result


def _verdict(result: CheckResult) -> None:
    result.status = status_from_measurements(result.measurements)
    errors = result.details.get("errors") or []
    if errors:
        result.status = FAIL
        e = errors[0]
        where = f" at ({e['row']}, {e['col']}): {e['actual']!r} vs {e['expected']!r}" if "row" in e else ""
        result.reason = f"{len(errors)} GEMM error(s); first: {e['kind']} on {e['device']} {e['dtype']}{where}"
        result.action = ("drain the node: the GPU computes wrong results; rerun to see whether it repeats, "
                         "then run the vendor's diagnostic (dcgmi diag -r 3) and check the Xid log")
    elif result.status == FAIL:
        bad = [f"{m.name}@{m.device} {m.value:.3g} (need {m.op} {m.threshold:.3g})" for m in result.measurements
               if m.ok() is False]
        result.reason = "; ".join(bad)
        result.action = "check clocks, power and thermal throttling (nvidia-smi -q -d PERFORMANCE,POWER)"
    else:
        ways = "tiles, checksums, consensus" if len(result.details.get("products", {})) > 1 else "tiles, checksums"
        result.reason = f"products correct ({ways})"
