"""The training pass: Linen ``init`` / ``apply`` / ``TrainState`` code -> the NNX split/merge fast path.

Runs after the module pass, on its output, over the code *outside* module classes. The NNX shapes it
emits are each verified against the Linen numerics (``tests/test_train_loop_migration.py``); the
module that handles a construct says what it becomes and why. A train state changes representation for
the whole file, so the conversion is all or nothing: if any training construct of the file has no safe
conversion, nothing of the training code is rewritten and each such construct gets a ``manual`` finding
with an inline TODO marker.

Modules, in the order the data flows:

- :mod:`.driver` -- the entry point (:func:`migrate_training`): parse, analyse, plan, report, rewrite.
  Where the training code would stay as written, it tries once more on the text :mod:`.init_subscripts`
  and :mod:`.returned_updates` give (``params = model.init(...)['params']`` and
  ``return state.apply_gradients(...), loss`` as two statements each).
- :mod:`.values` -- :class:`ValueAnalysis`: what each expression is (a Linen module value, the variables
  ``init`` returned, a collection of them, a train state), through names, closures and the file's
  functions. Built on libcst's scope analysis and the module pass's name resolver.
- :mod:`.planner` -- :class:`TrainPlanner`: the plan (notes, edits, statements to add) and the tree
  helpers the handlers share; :mod:`.exprs` the pure expression helpers.
- :mod:`.dispatch` -- one walk over the tree routes each node to its construct's handler:
  :mod:`.init` (module values, ``model.init``), :mod:`.eval_shape` (``jax.eval_shape`` of an init),
  :mod:`.state_reads` (``variables['params']``), :mod:`.apply` (``apply`` / ``apply_fn``),
  :mod:`.train_state` (``TrainState.create``, fields, ``apply_gradients`` / ``replace``; an optimizer
  that masks by the params tree blocks it, :mod:`.optimizer_masks`),
  :mod:`.sharding` (partition specs; eager sharding and call-time state facts), :mod:`.receivers` (an
  ``init`` / ``apply`` on a receiver the analysis does not follow). Handlers are functions
  ``(plan, node, ...)`` that only read the analysis and write the plan.
- :mod:`.rewrite` -- :class:`TrainRewriter` applies the plan bottom-up, then the import edits.

Full tree walks per file that mentions training code (the module pass's output, parsed once more):
the parse; libcst's scope analysis (the only metadata resolved up front: bindings, reads, closures);
the module pass's name resolver for qualified names (:mod:`linen2nnx.migrate.names`); one index walk
(:meth:`ValueAnalysis._index`: the parent map, the nodes to plan, the order of reads); one code
generation for the positions of the findings, if any. Only when something is rewritten or marked:
the rewrite, the name count of the import clean-up, and two code generations (the import check and
the output). libcst's positions (with ends) are resolved only for ``new = old.apply_gradients(...)``.
Functions are walked on their own for their names (once each) and their return statements.
"""

from linen2nnx.migrate.training.driver import mentions_training, migrate_training

__all__ = ["mentions_training", "migrate_training"]
