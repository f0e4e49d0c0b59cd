"""Which files the module pass reads: a cheap test on a file's text before it is parsed.

Most files of a tree have nothing to migrate; parsing them would cost as much as the migration of the
rest. A file is read when it says ``linen``, when it has training code, when it names a class another
file of the run defines, or when another file of the run imports its module-level functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from linen2nnx.migrate.file_state import IMPORTED_KEY
from linen2nnx.migrate.verify_outside import run_class_names


def mentions_linen(source: str) -> bool:
    """Cheap pre-filter: a file that never says ``linen`` has nothing to migrate..."""
    return "linen" in source


def uses_run_class(source: str, external: Mapping[str, Any] | None) -> bool:
    """... unless it names a class another file of the run defines. A preset that only overrides
    field defaults (``class Gemma2_2B(_transformer.Transformer): config = ...``) never says
    ``linen``, yet left as it is it sets a field of a class that is now NNX, which has no fields; a
    script or config that builds the model (``gm.nn.Gemma3_4B(tokens=...)``) builds it without
    ``rngs``. Cheap and conservative (any word that is such a class's name): the codemod resolves
    the imports, and the verifier checks the calls (:mod:`.verify_outside`)."""
    if not external:
        return False
    return not run_class_names(external).isdisjoint(_WORD.findall(source))


_WORD = re.compile(r"[A-Za-z_]\w*")


def helpers_for_importers(source: str, module_name: str, factories: Mapping[str, Any] | None) -> bool:
    """... or it defines module-level functions another file of the run imports (``ops.act(x)``, a
    helper that keeps its argument's last axis): the pass records what they do for the importers,
    whose dataflow would otherwise stop at the call. Its text is left as it is."""
    imported = (factories or {}).get(IMPORTED_KEY) or ()
    return module_name in imported and ("\ndef " in source or source.startswith("def "))


def read_by_module_pass(
    source: str, module_name: str, external: Mapping[str, Any] | None, factories: Mapping[str, Any] | None
) -> bool:
    """Whether the module pass reads the file (the tests above, and training code)."""
    from linen2nnx.migrate.training import mentions_training

    return (
        mentions_linen(source)
        or mentions_training(source)
        or uses_run_class(source, external)
        or helpers_for_importers(source, module_name, factories)
    )
