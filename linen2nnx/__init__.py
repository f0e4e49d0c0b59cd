"""linen2nnx: move Flax Linen code and checkpoints to Flax NNX, with evidence.

Stages (each a subpackage, each a CLI subcommand):

- ``migrate``            Linen source -> NNX source + name map + report (libcst codemods)
- ``checkpoint_convert`` Linen checkpoint -> NNX checkpoint, validated against the NNX model
- ``equivalence``        Linen vs NNX parity: forward, gradients, loss, batch stats
- ``reports``            renderers for findings and parity results
"""

__version__ = "0.1.0"
