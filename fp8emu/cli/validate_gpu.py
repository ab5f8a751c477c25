"""``fp8emu validate-gpu``: compare the GPU's casts and ``torch._scaled_mm`` with the profiles.

Exit status: 0 all matched (with ``--tc-questions``: every question has a
candidate that reproduces every output); 1 any mismatch or failed case (or
no GPU with ``--require-gpu``); 3 no CUDA device or no torch, or every case skipped
(nothing validated).
"""

from __future__ import annotations

import json

from ..gpu import tc_questions, validate as validate_gpu
from . import output_file


def _positive(text):
    try:
        v = int(text)
    except ValueError:
        raise ValueError(f"--limit must be a positive integer, got {text!r}") from None
    if v < 1:
        raise ValueError(f"--limit must be a positive integer, got {v}")
    return v


def _tc_status(res) -> int:
    """A failed question, or one that no candidate reproduces on every shipped vector, is a mismatch: the
    GPU follows none of the models (exit 0 said "all matched" there)."""
    for name, counts in res.items():
        n = tc_questions.load_vectors(name)["outputs"].shape[1]
        if isinstance(counts, str) or max(counts.values(), default=0) < n:
            return validate_gpu.EXIT_MISMATCH
    return validate_gpu.EXIT_OK


def register(sub, name, help_text):
    """Add the ``validate-gpu`` subcommand."""
    p = sub.add_parser(name, help=help_text,
                       description="Cast every float32 (or the first --limit) and every float16/bfloat16 bit "
                                   "pattern with torch, Triton and JAX on the GPU, run torch._scaled_mm on a "
                                   "few shapes, and compare bit for bit with fp8emu's profiles.",
                       epilog="exit status: 0 all matched (with --tc-questions: every question has a candidate "
                              "that reproduces every output); 1 a mismatch or a failed case (or no GPU with "
                              "--require-gpu); 3 no CUDA device or torch, or every case skipped: nothing validated")
    p.add_argument("--limit", default=None, metavar="N",
                   help="validate only the first N float32 patterns (a positive integer)")
    p.add_argument("--require-gpu", action="store_true",
                   help="exit 1 instead of 3 when nothing was validated (no GPU/torch, or every case skipped)")
    p.add_argument("--no-scaled-mm", action="store_true", help="skip the torch._scaled_mm checks")
    p.add_argument("--tc-questions", action="store_true",
                   help="run only the discriminating tensor-core vectors (fp8emu.gpu.tc_questions: B200 FP8 width and "
                        "rounding, NVFP4 accumulation, MXFP8 scale alignment) and print which model reproduces them")
    p.add_argument("--json", metavar="PATH", default=None, type=output_file(), help="write a machine-readable report to PATH")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def run(args) -> int:
    """Run the validation; the exit status says what happened."""
    limit = None if args.limit is None else _positive(args.limit)
    if args.tc_questions:
        # the tensor-core vectors are a fixed set and run no cast sweep or _scaled_mm: these were ignored
        # (--quiet too: the questions print their findings on stdout and no progress on stderr to silence)
        given = [opt for opt, v in (("--limit", args.limit), ("--no-scaled-mm", args.no_scaled_mm),
                                    ("--quiet", args.quiet)) if v]
        if given:
            raise ValueError(f"--tc-questions runs only the tensor-core vectors; it takes no {', '.join(given)}")
        res = tc_questions.validate(out=print)
        if res is None:
            status = validate_gpu.EXIT_MISMATCH if args.require_gpu else validate_gpu.EXIT_NO_GPU
        else:
            status = _tc_status(res)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"tc_questions": res, "exit_status": status}, fh, indent=1)
        return status
    res = validate_gpu.validate(limit=limit, scaled_mm=not args.no_scaled_mm, progress=not args.quiet)
    if res is None:
        _, reason = validate_gpu.gpu_available()
        report = validate_gpu.report_dict([], gpu=False, reason=str(reason))
        status = validate_gpu.EXIT_MISMATCH if args.require_gpu else validate_gpu.EXIT_NO_GPU
    else:
        results, device = res
        report = validate_gpu.report_dict(results, device=device)
        status = report["exit_status"]
        if status == validate_gpu.EXIT_NO_GPU and args.require_gpu:     # every case skipped: nothing validated
            status = validate_gpu.EXIT_MISMATCH
    report["exit_status"] = status
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    return status
