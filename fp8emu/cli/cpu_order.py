"""``fp8emu cpu-order``: which float32 summation order torch's CPU GEMMs take on this machine, and why."""

from __future__ import annotations

import importlib.util
import json
import re

from ..gemm import cpu_order

DEFAULT_SHAPES = ("64x512x64", "32x1024x32")
#: The most torch threads a probe takes: torch's own thread pool crashed (a segmentation fault) at
#: 100000 on the machine this was tried on; thousands already oversubscribe any CPU.
MAX_THREADS = 1024
#: Bytes a probe of an M x K x N GEMM holds at its peak, per element of A, B and C together: its six
#: random products' operands and outputs, torch's copies and the packed queries (peak resident memory
#: grew by 10 to 12 float32 copies probing 512x4096x512 and 2048x1024x2048; this allows 16).
PROBE_BYTES_PER_ELEMENT = 64
#: The longest sum described: an order is built term by term (K = 10**6 takes about 15 s), and the probe
#: (:func:`fp8emu.gemm.order_probe.reveal`) takes K up to 2**20.
MAX_K = 1 << 20
#: The most outputs an order describes: its M x N int16 tree indices must stay below NumPy's 2**63 bytes
#: (beyond, NumPy's own "array is too big" error; 2**62 outputs are 2**63 bytes, one too many).
MAX_OUTPUTS = (1 << 62) - 1


def _available_bytes():
    """The memory the system can give without swapping (``MemAvailable``), or None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _check_probe_memory(M, K, N, available):
    need = PROBE_BYTES_PER_ELEMENT * (M * K + K * N + M * N)
    if available is not None and need > available:
        raise ValueError(f"probing {M}x{K}x{N} needs about {need / 2**30:.1f} GiB (its operands and outputs, "
                         f"several times); {available / 2**30:.1f} GiB is available: give a smaller shape, or "
                         "FP8EMU_CPU_ORDER=<a recorded model> to describe without probing")


def _check_probe_work(M, K, N):
    too_long = cpu_order.probe_too_long(M, K, N)
    if too_long:
        raise ValueError(f"{too_long}: give a larger M or N or a smaller K, or FP8EMU_CPU_ORDER=<a recorded "
                         "model> to describe without probing")


def _shape(text):
    shown = repr(text) if len(text) <= 60 else repr(text[:40]) + "..."      # one short line, whatever was given
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)", text.strip(), re.ASCII)      # ASCII: "٠" is no zero to lstrip
    # leading zeros are no size: 0...04 of 33 digits is 4 (it was called "past what is described")
    digits = max(len(v.lstrip("0")) for v in m.groups()) if m else 0
    if digits > 30:
        # past every bound below; int() of over 4300 digits was Python's "use sys.set_int_max_str_digits()"
        raise ValueError(f"a size of {digits} digits is past what is described (K up to "
                         f"2**20, M x N below 2**62), got {shown}")
    if not m or min(int(v.lstrip("0") or "0") for v in m.groups()) < 1:
        raise ValueError(f"a shape is MxKxN with positive integers (e.g. 64x512x64), got {shown}")
    M, K, N = (int(v.lstrip("0") or "0") for v in m.groups())
    if K > MAX_K:
        raise ValueError(f"K up to {MAX_K} (2**20) is described, got {shown}")
    if M * N > MAX_OUTPUTS:
        raise ValueError(f"M x N = {M * N:.3g} outputs is more than an array indexes (2**62 - 1: an order holds an "
                         f"int16 tree index per output), got {shown}")
    return M, K, N


def register(sub, name, help_text):
    """Add the ``cpu-order`` subcommand."""
    p = sub.add_parser(name, help=help_text,
                       description="Say which summation order fp8emu uses for torch's CPU float32 GEMMs "
                                   "(torch.mm, the emulated _scaled_mm path, torchao's emulated GEMMs) on this "
                                   "machine: revealed by probing torch (when installed, cached per CPU, library, "
                                   "MKL settings, threads, shape and layout) or a recorded model, with why.")
    p.add_argument("shapes", nargs="*", default=None, metavar="MxKxN",
                   help=f"GEMM shapes to describe (default: {' '.join(DEFAULT_SHAPES)})")
    p.add_argument("--threads", type=int, default=None,
                   help=f"torch threads, 1..{MAX_THREADS} (default: torch's current count)")
    p.add_argument("--layout", choices=cpu_order.LAYOUTS, default=None,
                   help="A and B row-major (N) or transposed views (T) as torch.mm gets them (default NN)")
    p.add_argument("--recorded", action="store_true",
                   help="list the recorded models and where each was proven (takes no shapes, --threads or "
                        "--layout)")
    p.add_argument("--json", action="store_true", help="the facts as JSON (with --recorded too)")
    p.set_defaults(func=run)


def run(args) -> int:
    """Print what this machine's torch CPU GEMMs sum in which order."""
    if args.recorded:
        given = [name for name, v in (("shapes", args.shapes), ("--threads", args.threads),
                                      ("--layout", args.layout)) if v not in (None, [])]   # --threads 0 too
        if given:
            raise ValueError(f"--recorded lists the recorded models; it takes no {', '.join(given)}")
        if args.json:
            print(json.dumps([{"name": m.name, "proven_on": m.proven_on} for m in cpu_order.RECORDED.values()],
                             indent=1))
            return 0
        for m in cpu_order.RECORDED.values():
            print(f"{m.name}: {m.proven_on}")
        return 0
    if args.threads is not None and not 1 <= args.threads <= MAX_THREADS:
        raise ValueError(f"--threads must be an integer in 1..{MAX_THREADS}, got {args.threads}")
    args.layout = args.layout or "NN"
    shapes = [_shape(s) for s in (args.shapes or DEFAULT_SHAPES)]
    if cpu_order.policy() == "revealed" and importlib.util.find_spec("torch") is None:
        # order_for's RuntimeError reached the user as a traceback
        raise ValueError("FP8EMU_CPU_ORDER=revealed probes torch's own GEMM, and torch is not installed "
                         "(pip install 'fp8emu[torch]'); use 'auto' or a recorded model, one of "
                         f"{sorted(cpu_order.RECORDED)}")
    if cpu_order.policy() in ("auto", "revealed") and importlib.util.find_spec("torch") is not None:
        available = _available_bytes()
        for M, K, N in shapes:
            _check_probe_memory(M, K, N, available)
            _check_probe_work(M, K, N)
    if args.json:
        # the cache's own warning apart from the shapes' (it took the first shape's "warning", in place of its own)
        refused = cpu_order.cache_problem()
        rows = []
        for M, K, N in shapes:
            order, src, said = cpu_order.order_and_warnings(M, K, N, threads=args.threads, layout=args.layout)
            rows.append({"shape": [M, K, N], "layout": args.layout, "source": src, "order": order.describe(),
                         "warning": " | ".join(said) or None})     # as the text's [warning: ...]
        # the library as the text's "library:" line gives it (the JSON had left it out; None: torch not installed)
        print(json.dumps({"machine": cpu_order.machine(), "library": cpu_order.library(), "policy": cpu_order.policy(),
                          "cache": {"path": str(cpu_order.cache_path()), "not_used": refused}, "gemms": rows},
                         indent=1))
        return 0
    print("\n".join(cpu_order.describe_here(shapes, threads=args.threads, layout=args.layout)))
    return 0
