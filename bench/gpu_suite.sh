#!/bin/sh
# On a node with an NVIDIA GPU and PyTorch (CUDA build): run the validator, then measure plain
# torch.matmul (bf16, n=8192, 50 products) and a plain device-to-device copy, so that gemm's
# FLOP/s and gpu_memory's bandwidth can be read against what torch alone reaches on this GPU.
#
#     sh bench/gpu_suite.sh            # writes $OUT (default ./out): validate.json, reference.txt
#
# Well under 15 minutes on one GPU; each step has its own time limit.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-./out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

echo "== nvidia-smi -L"
nvidia-smi -L || echo "nvidia-smi failed (exit $?)"
python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda,
                               "GPUs", torch.cuda.device_count())'

echo "== nodewarden validate --profile auto"
timeout 600 python3 -m nodewarden validate --profile auto --no-progress --json "$OUT/validate.json"
echo "validate exit code: $?"

echo "== torch alone"
timeout 180 python3 - "$OUT/validate.json" >"$OUT/reference.txt" 2>&1 <<'EOF'
import json, sys, time
import torch

def timed(fn, iterations):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iterations):
        fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0

n, iterations = 8192, 50
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
c = torch.empty_like(a)
s = timed(lambda: torch.matmul(a, b, out=c), iterations)
print(f"torch.matmul bf16 n={n} x{iterations}: {2 * n**3 * iterations / s / 1e12:.1f} TFLOP/s (torch defaults)")
del a, b, c

nbytes, iterations = 4 << 30, 20
src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
dst = torch.empty_like(src)
s = timed(lambda: dst.copy_(src), iterations)
print(f"device-to-device copy 4 GiB x{iterations}: {2 * nbytes * iterations / s / 1e9:.0f} GB/s (read + write)")

try:
    doc = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    sys.exit(f"no validate report to compare: {e}")
print(f"validate: profile {doc['profile']}, exit code {doc['exit_code']}")
for check in doc["checks"]:
    if check["check"] not in ("gemm", "gpu_memory"):
        continue
    print(f"  {check['check']}: {check['status']} in {check['duration_s']} s: {check['reason']}")
    for m in check["measurements"]:
        if m["unit"] in ("FLOP/s", "B/s") and isinstance(m["value"], (int, float)):
            scale, unit = (1e12, "TFLOP/s") if m["unit"] == "FLOP/s" else (1e9, "GB/s")
            floor = f" (min {m['threshold'] / scale:.0f})" if m["threshold"] else ""
            print(f"    {m['name']:<16} {m['device']:<7} {m['value'] / scale:9.1f} {unit}{floor}")
EOF
rc=$?
cat "$OUT/reference.txt"
echo "torch-alone exit code: $rc"
