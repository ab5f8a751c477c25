"""``fp8emu cpu-order``: which float32 summation order torch's CPU GEMMs take on this machine, and why."""

from __future__ import annotations

import json
import re

from ..gemm import cpu_order


def _shape(text):
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)", text.strip())
    if not m or min(int(v) for v in m.groups()) < 1:
        raise ValueError(f"a shape is MxKxN with positive integers (e.g. 64x512x64), got {text!r}")
    return tuple(int(v) for v in m.groups())


def register(sub, name, help_text):
    """Add the ``cpu-order`` subcommand."""
    p = sub.add_parser(name, help=help_text,
                       description="Say which summation order fp8emu uses for torch's CPU float32 GEMMs "
                                   "(torch.mm, the emulated _scaled_mm path, torchao's emulated GEMMs) on this "
                                   "machine: revealed by probing torch (when installed, cached per CPU, library, "
                                   "MKL settings, threads, shape and layout) or a recorded model, with why.")
    p.add_argument("shapes", nargs="*", default=["64x512x64", "32x1024x32"], metavar="MxKxN",
                   help="GEMM shapes to describe (default: 64x512x64 32x1024x32)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's current count)")
    p.add_argument("--layout", choices=cpu_order.LAYOUTS, default="NN",
                   help="A and B row-major (N) or transposed views (T) as torch.mm gets them (default NN)")
    p.add_argument("--recorded", action="store_true", help="list the recorded models and where each was proven")
    p.add_argument("--json", action="store_true", help="the facts as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    """Print what this machine's torch CPU GEMMs sum in which order."""
    if args.recorded:
        for m in cpu_order.RECORDED.values():
            print(f"{m.name}: {m.proven_on}")
        return 0
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be a positive integer, got {args.threads}")
    shapes = [_shape(s) for s in args.shapes]
    if args.json:
        rows = []
        for M, K, N in shapes:
            order, src = cpu_order.order_for(M, K, N, threads=args.threads, layout=args.layout)
            rows.append({"shape": [M, K, N], "layout": args.layout, "source": src, "order": order.describe()})
        print(json.dumps({"machine": cpu_order.machine(), "policy": cpu_order.policy(), "gemms": rows}, indent=1))
        return 0
    print("\n".join(cpu_order.describe_here(shapes, threads=args.threads, layout=args.layout)))
    return 0
