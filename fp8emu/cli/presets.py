"""``fp8emu presets``: the matrix-instruction catalogue and the evidence behind each preset."""

from __future__ import annotations

import json

from ..gemm.catalogue import INSTRUCTIONS, presets


def register(sub, name, help_text):
    """Add the ``presets`` subcommand."""
    p = sub.add_parser(name, help=help_text,
                       description="List the matrix-instruction presets (fp8emu.gemm.mma(..., instruction=NAME), "
                                   "scaled_mm / block_scaled_mm accumulator=NAME): architecture, instruction, "
                                   "operand formats and output, and the evidence each reproduces (public GPU "
                                   "recordings, MMA-Sim) or 'model only'.")
    shape = p.add_mutually_exclusive_group()     # --names --json printed the JSON, --names ignored
    shape.add_argument("--names", action="store_true", help="only the names, one per line")
    p.add_argument("--arch", metavar="TEXT", help="only the presets whose architecture contains TEXT "
                                                  "(case-insensitive), e.g. Blackwell, CDNA3")
    shape.add_argument("--json", action="store_true", help="one JSON list, as fp8emu.gemm.presets() returns it")
    p.set_defaults(func=run)


def run(args) -> int:
    """Print the presets."""
    rows = presets()
    if args.arch is not None:
        want = args.arch.strip().lower()
        rows = [r for r in rows if want and want in r["arch"].lower()]
        if not rows:
            archs = sorted({r["arch"] for r in presets()})
            raise ValueError(f"no preset's architecture contains {args.arch!r}; the architectures are "
                             f"{', '.join(archs)}")
    if args.json:
        print(json.dumps(rows, indent=1))
    elif args.names:
        print("\n".join(r["name"] for r in rows))
    else:
        for r in rows:
            ins = INSTRUCTIONS[r["name"]]
            print(f"{r['name']}  [{r['arch']}]  {r['ptx']}")
            print(f"    {', '.join(ins.formats)} -> {ins.out}; {ins.datapath} steps of {ins.step}, "
                  f"{ins.frac_bits} fraction bits, {ins.rounding}")
            for e in r["evidence"] or ["model only: " + r["model"]]:
                print(f"    - {e}")
    return 0
