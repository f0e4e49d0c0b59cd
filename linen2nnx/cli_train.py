"""``linen2nnx train``: its options, and a thin call into :func:`linen2nnx.train.run_training`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from linen2nnx.cli_check import mesh_arg, non_negative_int
from linen2nnx.errors import EXIT_OK, L2NError
from linen2nnx.reports.console import make_console

err_console = make_console()


def _positive_int(text: str) -> int:
    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {value}")
    return value


def add_train_parser(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser(
        "train",
        help="train the NNX model of a spec, e.g. on from a converted Linen checkpoint",
        description="Train the NNX side of a model pair spec (jitted split/merge step, optional mesh), "
        "writing OUT/metrics.jsonl, TensorBoard events and OUT/checkpoints/. Exit 0: trained; "
        "2: usage or input error (nothing written).",
    )
    t.add_argument("spec", metavar="SPEC", help="model pair spec (module:function or file.py[:function])")
    t.add_argument("--out", required=True, help="run folder (metrics.jsonl, tensorboard/, checkpoints/)")
    t.add_argument("--init-from", metavar="NNX_CKPT", help="start from what `convert` wrote (optimizer too)")
    t.add_argument("--steps", type=non_negative_int, default=10, help="steps to train (default: 10)")
    t.add_argument("--batch-size", type=_positive_int, help="global batch size (default: the spec's)")
    t.add_argument("--mesh", type=mesh_arg, metavar="AXIS=SIZE,...", help="e.g. data=2,fsdp=2,tensor=2")
    t.add_argument(
        "--grad-accum", type=_positive_int, metavar="K", help="micro-batches per step (default: 1)"
    )
    t.add_argument(
        "--remat",
        choices=("none", "minimal", "full"),
        help="rematerialise the loss (on top of the model's own remat; default: the model's only)",
    )
    t.add_argument(
        "--save-every",
        type=non_negative_int,
        metavar="K",
        help="checkpoint every K steps (default: the final step only; a --resume keeps the run's)",
    )
    t.add_argument(
        "--keep",
        type=_positive_int,
        metavar="N",
        help="checkpoints kept (default: 3; a --resume keeps the run's)",
    )
    t.add_argument(
        "--resume",
        action="store_true",
        help="continue from the latest checkpoint in OUT, with the seed, --deterministic, batch size, "
        "--grad-accum and --data it was trained with",
    )
    t.add_argument("--data", help="'synthetic' (default) or a .npy token file")
    t.add_argument("--seed", type=int, help="data and init seed (default: 0)")
    t.add_argument(
        "--deterministic",
        action="store_true",
        default=None,
        help="dropout off, so the losses can be compared step by step with a Linen run",
    )
    t.add_argument("--compile-only", action="store_true", help="compile the step, print memory and FLOPs")
    t.add_argument("--profile", action="store_true", help="write a jax profiler trace to OUT/profile")
    t.add_argument(
        "--coordinator",
        metavar="HOST:PORT",
        help="multi-process run: jax.distributed coordinator address (with --num-processes, --process-id)",
    )
    t.add_argument("--num-processes", type=_positive_int, default=1, help="processes of a multi-process run")
    t.add_argument("--process-id", type=non_negative_int, default=0, help="this process's index")


def _distributed(args: argparse.Namespace) -> None:
    """``jax.distributed.initialize`` before anything touches a device (every process runs the same
    command; together their devices form one mesh, each process feeding its rows of the batch)."""
    if args.num_processes == 1 and not args.coordinator:
        return
    if not args.coordinator or args.process_id >= args.num_processes:
        raise L2NError("a multi-process run needs --coordinator HOST:PORT and --process-id < --num-processes")
    import jax

    jax.distributed.initialize(
        coordinator_address=args.coordinator, num_processes=args.num_processes, process_id=args.process_id
    )


def cmd_train(args: argparse.Namespace) -> int:
    from linen2nnx.spec import load_pair
    from linen2nnx.train import TrainConfig, run_training
    from linen2nnx.train.loop import compile_only
    from linen2nnx.train.run_settings import CARRIED, SETTINGS

    if args.resume and args.init_from:
        raise L2NError("--resume continues OUT's own checkpoints; it cannot be combined with --init-from")
    _distributed(args)
    pair = load_pair(args.spec)
    # left out, a setting a resumed run recorded comes from its checkpoint (train/run_settings.py)
    given = frozenset(name for name in (*SETTINGS, *CARRIED) if getattr(args, name) is not None)
    optional = {name: getattr(args, name) for name in ("grad_accum", "save_every", "keep", "data", "seed")}
    cfg = TrainConfig(  # a flag left out keeps TrainConfig's default (a --resume then takes the run's)
        out=Path(args.out),
        steps=args.steps,
        batch_size=args.batch_size,
        mesh=args.mesh,
        remat=args.remat,
        resume=args.resume,
        init_from=Path(args.init_from) if args.init_from else None,
        deterministic=bool(args.deterministic),
        profile=args.profile,
        given=given,
        **{name: value for name, value in optional.items() if value is not None},
    )
    if args.compile_only:
        report = compile_only(pair, cfg)
        for line in report.lines():
            err_console.print(line, markup=False)
        print(json.dumps(report.to_json()))
        return EXIT_OK
    import jax

    from linen2nnx.train.state import fresh_optimizer_note

    note = fresh_optimizer_note(cfg.init_from) if cfg.init_from is not None else None
    if note is not None and jax.process_index() == 0:
        err_console.print(f"note: {note}", markup=False)
    result = run_training(pair, cfg, console=err_console if jax.process_index() == 0 else None)
    for line in result.notes if jax.process_index() == 0 else ():
        err_console.print(f"note: {line}", markup=False)
    first = result.records[0] if result.records else None
    if first is not None:
        err_console.print(
            f"trained steps {first['step']}..{result.end_step - 1}: loss {first['loss']:.6f} -> "
            f"{result.losses[-1]:.6f}; metrics in {cfg.out / 'metrics.jsonl'}",
            markup=False,
        )
    return EXIT_OK
