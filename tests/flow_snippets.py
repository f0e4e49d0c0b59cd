"""Running the size dataflow (``linen2nnx/migrate/dataflow.py``) over a snippet of a method body, for
the tests of what it follows through tuples, objects and dicts."""

import libcst as cst

from linen2nnx.migrate.dataflow import Feat, FeatureFlow
from linen2nnx.migrate.tuple_flow import record_classes

QUALNAMES = {
    "flax.struct.dataclass",
    "dataclasses.dataclass",
    "typing.NamedTuple",
    "transformers.utils.ModelOutput",
    "builtins.tuple",
}

A, B, X = Feat("expr", expr="self.a"), Feat("expr", expr="self.b"), Feat("input", input_name="x")
"""The values of ``a`` and ``b`` (sized by config) and ``x`` (the method's input) in every snippet."""


def snippet_qualnames(node: cst.CSTNode) -> set[str]:
    """Resolve the few names these snippets use by their spelling."""
    text = cst.Module(body=[]).code_for_node(node)
    return {q for q in QUALNAMES if q.endswith("." + text.split(".")[-1])}


def snippet_flow(body: str, classes: str = "") -> FeatureFlow:
    """Run the flow over ``body`` with ``a`` and ``b`` sized by config and ``x`` the method's input;
    ``classes``: module-level data classes the snippet builds."""
    records = record_classes(cst.parse_module(classes).body, snippet_qualnames)
    flow = FeatureFlow(["x"], lambda call: None, snippet_qualnames, records=records)
    flow.env.update(a=A, b=B)
    flow.run(cst.parse_module(body).body)
    return flow
