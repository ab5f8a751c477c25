"""``fp8emu train-demo``: the same MLP trained in float32 and in emulated FP8."""

from __future__ import annotations

from ..lab import train
from . import int_option


def register(sub, name, help_text):
    """Add the ``train-demo`` subcommand."""
    p = sub.add_parser(name, help=help_text,
                       description="Train the same MLP in float32 and with FP8-emulated linear layers "
                                   "(HYBRID: E4M3 forward, E5M2 backward; delayed scaling) and compare "
                                   "loss, accuracy and overflow/underflow counts.")
    p.add_argument("--steps", type=int_option(1), default=400, help="SGD steps (default 400)")
    p.add_argument("--dataset", default="synthetic", choices=("synthetic", "digits"),
                   help="synthetic (default) or scikit-learn digits (needs scikit-learn)")
    p.add_argument("--accumulator", default="fp32", choices=("fp32", "hopper"),
                   help="FP8 GEMM accumulation; hopper is emulated and slow")
    p.add_argument("--amax-history-len", type=int_option(1), default=16, help="delayed-scaling history (default 16)")
    p.add_argument("--train-size", type=int_option(1, 1 << 20), default=None,
                   help="synthetic training examples (default 8192; at most 2**20)")
    p.add_argument("--seed", type=int_option(0), default=0, help="seed of data and initialization")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    """Train both and print the comparison."""
    if args.dataset == "digits" and args.train_size is not None:   # ignored before: digits' split is fixed
        raise ValueError("--train-size sizes the synthetic task; digits uses its fixed 80/20 split of 1797 images")
    n_train = 8192 if args.train_size is None else args.train_size
    res = train.compare(steps=args.steps, dataset=args.dataset, accumulator=args.accumulator, seed=args.seed,
                        progress=not args.quiet, amax_history_len=args.amax_history_len,
                        n_train=n_train, n_test=max(256, n_train // 4))
    print(train.summary(res))
    return 0
