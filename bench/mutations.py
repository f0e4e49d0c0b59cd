"""Mutation testing of ``check``: inject a typical migration bug into migrated code, expect a
failed check *and* the right culprit module.

    python bench/mutations.py [--only NAME ...] [--twins DIR] [--out DIR]

Repository tooling, not part of the installed package: it reads the hand-written twins under
``tests/fixtures`` and is run by ``tests/test_mutations.py``.

Each :class:`Mutation` is a text edit of the NNX source of one zoo model. The source is what
``migrate --trace`` writes for that model when its migration has no ``manual`` finding; otherwise a
hand-written NNX twin stands in (``tests/fixtures/nnx_twins/<model>.py``, with ``pair()``), until
the codemod handles the model. A mutation is *detected* when ``check`` fails, *localised* when
``result.divergence.culprit`` names one of the modules the bug was put in (NNX path).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from linen2nnx.errors import L2NError

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TWINS = REPO / "tests" / "fixtures" / "nnx_twins"


class NotApplicable(L2NError):
    """The mutation's pattern does not occur in this source (the code has another shape)."""


def _sub(pattern: str, repl: str, *, count: int = 1, flags: int = 0) -> Callable[[str], str]:
    def edit(src: str) -> str:
        out, n = re.subn(pattern, repl, src, count=count, flags=flags)
        if n == 0:
            raise NotApplicable(f"pattern {pattern!r} not found")
        return out

    return edit


def _replace_ctor(attr: str, ctor: str, new: str, class_src: str) -> Callable[[str], str]:
    """``self.<attr> = <ctor>(`` -> ``self.<attr> = <new>(``, plus the buggy class at the end of the file."""
    sub = _sub(rf"(self\.{attr}\s*=\s*){re.escape(ctor)}\(", rf"\g<1>{new}(")

    def edit(src: str) -> str:
        return sub(src) + "\n\n" + class_src.strip() + "\n"

    return edit


def _all_ctors(ctor: str, new: str, class_src: str) -> Callable[[str], str]:
    sub = _sub(re.escape(ctor) + r"\(", f"{new}(", count=0)

    def edit(src: str) -> str:
        return sub(src) + "\n\n" + class_src.strip() + "\n"

    return edit


def _chain(*edits: Callable[[str], str]) -> Callable[[str], str]:
    def edit(src: str) -> str:
        for e in edits:
            src = e(src)
        return src

    return edit


_BIAS_DROPPED = '''
class _BiasDropped(nnx.Linear):
    """Injected bug: the bias exists (the checkpoint still converts) but is never added."""

    def __call__(self, inputs):
        return super().__call__(inputs) - self.bias[...]
'''

_GATES_SWAPPED = '''
class _GateSwappedLSTMCell(nnx.LSTMCell):
    """Injected bug: the input and forget gates trade places."""

    def __call__(self, carry, inputs):
        c, h = carry
        i = self.gate_fn(self.if_(inputs) + self.hf(h))
        f = self.gate_fn(self.ii(inputs) + self.hi(h))
        g = self.activation_fn(self.ig(inputs) + self.hg(h))
        o = self.gate_fn(self.io(inputs) + self.ho(h))
        new_c = f * c + i * g
        new_h = o * self.activation_fn(new_c)
        return (new_c, new_h), new_h
'''


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    bug: str
    model: str
    edit: Callable[[str], str]
    culprits: tuple[str, ...]
    """NNX module paths that count as the right place (the module whose code holds the bug)."""
    how: tuple[str, ...] = ()
    """Checks (name prefixes) expected to see it; one of them failing is enough."""


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "norm_epsilon",
        "LayerNorm epsilon 1e-12 -> 1e-3",
        "encoder",
        _sub(r"(self\.attention_norm\s*=\s*nnx\.LayerNorm\([^\n]*?epsilon=)1e-12", r"\g<1>1e-3"),
        ("layer/0/attention_norm",),
        ("forward", "grad"),
    ),
    Mutation(
        "dropped_precision",
        "precision=HIGHEST dropped from a Dense",
        "encoder",
        _sub(r",\s*precision=jax\.lax\.Precision\.HIGHEST", ""),
        ("layer/0/intermediate",),
        ("precision",),
    ),
    Mutation(
        "missing_bias",
        "bias never added in the head",
        "mlp",
        _replace_ctor("head", "nnx.Linear", "_BiasDropped", _BIAS_DROPPED),
        ("head",),
        ("forward",),
    ),
    Mutation(
        "lstm_gate_order",
        "LSTM input/forget gates swapped",
        "rnn",
        _all_ctors("nnx.LSTMCell", "_GateSwappedLSTMCell", _GATES_SWAPPED),
        ("lstm/cell",),
        ("forward",),
    ),
    Mutation(
        "scan_axis",
        "time scan over axis 0 instead of 1",
        "rnn",
        _chain(
            _sub(r"(in_axes=\(nnx\.Carry,\s*None,\s*)1\)", r"\g<1>0)"),
            _sub(r"(out_axes=\(nnx\.Carry,\s*)1\)", r"\g<1>0)"),
        ),
        ("", "gru"),
        ("forward",),
    ),
    Mutation(
        "rope_base",
        "RoPE base 10_000 -> 500_000",
        "decoder",
        _sub(r"max_timescale=cfg\.rope_max_timescale", "max_timescale=500_000"),
        ("layers/self_attention/rotary",),
        ("forward",),
    ),
    Mutation(
        "dropped_sow",
        "sown attention-entropy aux value dropped",
        "decoder",
        _sub(
            r"^[ \t]*self\.sow\(nnx\.Intermediate,\s*[\"']attention_entropy[\"'][^\n]*\n",
            "",
            flags=re.MULTILINE,
        ),
        ("layers/self_attention",),
        ("intermediates",),
    ),
    Mutation(
        "dropout_rate",
        "Dropout rate 0.1 -> 0.5 (dropout is off in every compared forward)",
        "encoder",
        _sub(r"(self\.dropout_0\s*=\s*nnx\.Dropout\()self\.dropout_rate", r"\g<1>0.5"),
        ("layer/0/dropout_0",),
        ("config",),
    ),
    Mutation(
        "scan_reverse",
        "layer stack scanned in reverse (Linen scans forward)",
        "decoder",
        _sub(r"in_axes=\(nnx\.Carry,\s*0\)", "reverse=True, in_axes=(nnx.Carry, 0)"),
        ("layers",),
        ("forward",),
    ),
    Mutation(
        "bn_momentum",
        "BatchNorm momentum 0.9 -> 0.99",
        "cnn",
        _sub(r"(self\.batch_norm_0\s*=\s*nnx\.BatchNorm\([^\n]*?momentum=)0\.9\b", r"\g<1>0.99"),
        ("batch_norm_0",),
        ("batch_stats",),
    ),
)


# ---- the code under test -------------------------------------------------------------------------
@dataclasses.dataclass
class Base:
    """Where one model's NNX code lives: a migrated package or a hand-written twin."""

    model: str
    source: str
    """``migrated`` or ``twin``."""
    directory: Path
    model_file: str
    """File name (in ``directory``) the mutations edit."""
    spec_file: str
    """File name (in ``directory``) whose ``pair()`` builds the model pair."""
    findings: list[str] = dataclasses.field(default_factory=list)

    def pair(self, directory: Path | None = None) -> Any:
        from linen2nnx.spec import load_pair

        return load_pair(str((directory or self.directory) / self.spec_file) + ":pair")


def migrate_zoo(model: str, out_dir: Path) -> tuple[Path, list[str]]:
    """Migrate a zoo model with ``--trace`` into ``out_dir``; ``(spec path, manual findings)``."""
    from linen2nnx import zoo
    from linen2nnx.migrate.engine import Mode, migrate_paths
    from linen2nnx.migrate.spec_writer import write_pair_spec
    from linen2nnx.migrate.trace import trace_linen
    from linen2nnx.spec import load_linen_side

    ref = zoo.spec_ref(model)
    trace = trace_linen(load_linen_side(ref), spec_ref=ref)
    result = migrate_paths([zoo.model_source(model)], Mode.OUT_DIR, out_dir=out_dir, trace=trace)
    manual = [f.format_text() for f in result.findings if f.severity.value in ("manual", "error")]
    spec = write_pair_spec(out_dir, trace, result)
    return spec, manual


def prepare(model: str, root: Path, twins: Path | None = DEFAULT_TWINS) -> Base:
    """The migrated model when its migration is clean, else the hand-written twin (or an error)."""
    out = root / f"{model}-migrated"
    spec, manual = migrate_zoo(model, out)
    if not manual:
        return Base(model, "migrated", out, "model.py", spec.name)
    twin = (twins / f"{model}.py") if twins is not None else None
    if twin is None or not twin.is_file():
        raise L2NError(
            f"{model}: migration left {len(manual)} manual finding(s) and there is no NNX twin {twin}"
        )
    twin_dir = root / f"{model}-twin"
    twin_dir.mkdir(parents=True, exist_ok=True)
    for f in twins.glob(f"{model}*"):
        shutil.copy(f, twin_dir / f.name)
    return Base(model, "twin", twin_dir, twin.name, twin.name, findings=manual)


def mutate(base: Base, mutation: Mutation, root: Path) -> Path:
    """A copy of ``base.directory`` with the mutation applied to the model file; returns the copy."""
    dst = root / f"{base.model}-{base.source}-{mutation.name}"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(base.directory, dst, ignore=shutil.ignore_patterns("__pycache__"))
    target = dst / base.model_file
    target.write_text(mutation.edit(target.read_text()))
    return dst


@dataclasses.dataclass
class Row:
    bug: str
    model: str
    source: str
    detected: bool
    localised: bool
    culprit: str
    culprit_check: str
    failed_checks: list[str]
    seconds: float
    result: Any = None

    def as_tuple(self) -> tuple[str, ...]:
        return (
            self.bug,
            self.model,
            self.source,
            _yes(self.detected),
            _yes(self.localised),
            f"{self.culprit or '(root)'} [{self.culprit_check}]" if self.detected else "",
            ", ".join(self.failed_checks),
            f"{self.seconds:.1f}s",
        )


def _yes(x: bool) -> str:
    return "yes" if x else "NO"


def run_mutation(base: Base, mutation: Mutation, root: Path, **check_kwargs: Any) -> Row:
    """Apply ``mutation`` to ``base``, run ``check`` and judge detection and localisation."""
    from linen2nnx.equivalence import check
    from linen2nnx.equivalence.perturb import perturbed_init

    t0 = time.perf_counter()
    pair = base.pair(mutate(base, mutation, root))
    # perturbed weights: with init values (zero biases, unit scales) some bugs change nothing
    check_kwargs.setdefault("linen_ckpt", perturbed_init(pair))
    result = check(pair, **check_kwargs)
    culprit = result.divergence.culprit if result.divergence is not None else None
    failed = sorted({lf.check for lf in result.failures})
    return Row(
        bug=mutation.bug,
        model=mutation.model,
        source=base.source,
        detected=not result.passed,
        localised=culprit is not None and culprit.nnx_path in mutation.culprits,
        culprit=culprit.nnx_path if culprit else "",
        culprit_check=culprit.check if culprit else "",
        failed_checks=failed,
        seconds=time.perf_counter() - t0,
        result=result,
    )


HEADER = ("bug", "model", "code", "detected", "localised", "culprit [check]", "failed checks", "time")


def render(rows: Sequence[Row]) -> str:
    """The detection table as plain text."""
    table = [HEADER, *(r.as_tuple() for r in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    n = len(rows)
    lines.append(
        f"detected {sum(r.detected for r in rows)}/{n}, localised {sum(r.localised for r in rows)}/{n}"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/mutations.py", description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="mutation names to run (default: all)")
    parser.add_argument("--twins", type=Path, default=DEFAULT_TWINS, help="folder of hand-written NNX twins")
    parser.add_argument("--out", type=Path, help="work folder (default: a temporary one)")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        bases: dict[str, Base] = {}
        rows = []
        for m in chosen:
            if m.model not in bases:
                bases[m.model] = prepare(m.model, root, args.twins)
            rows.append(run_mutation(bases[m.model], m, root))
            print(f"{m.name}: {'detected' if rows[-1].detected else 'MISSED'}", file=sys.stderr)
    print(render(rows))
    return 0 if all(r.detected and r.localised for r in rows) else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
