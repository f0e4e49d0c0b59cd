"""A parameter read through a submodule's ``.variables`` (``linen2nnx/migrate/variable_reads.py``):
the read becomes the NNX attribute path only where the plan shows the parameter plainly, else it
stays the verifier's manual finding."""

import pytest

from linen2nnx.migrate import migrate_source

TEMPLATE = """import flax.linen as nn


def boxed(init):
    return nn.with_partitioning(init, ("vocab", "embed"))


class Decoder(nn.Module):
    def setup(self):
{decoder_setup}
        self.embed_tokens = nn.Embed(11, 4, embedding_init=init)

    def __call__(self, tokens):
        return self.embed_tokens(tokens)


class Wrapper(nn.Module):
    def setup(self):
        self.decoder = Decoder()

    def __call__(self, tokens):
        return self.decoder(tokens)


class LM(nn.Module):
    def setup(self):
        self.model = Wrapper()

    def __call__(self, tokens):
        return self.model(tokens) + {read}.sum()
"""
PLAIN_INIT = "        init = nn.initializers.normal(stddev=0.02)"


def _migrated(read: str, decoder_setup: str = PLAIN_INIT) -> tuple[str, list[str]]:
    src = TEMPLATE.format(read=read, decoder_setup=decoder_setup)
    result = migrate_source(src, "m.py", module_name="m")
    line = next(s.strip() for s in result.output.splitlines() if "return self.model(tokens)" in s)
    return line, [f.rule for f in result.findings if f.severity.value == "manual"]


@pytest.mark.parametrize(
    "read",
    [
        'self.model.decoder.embed_tokens.variables["params"]["embedding"]',
        'self.model.decoder.variables["params"]["embed_tokens"]["embedding"]',
        'self.model.variables["params"]["decoder"]["embed_tokens"]["embedding"]',
    ],
)
def test_reads_down_attribute_chains_and_linen_names_become_the_attribute_path(read):
    line, manual = _migrated(read)
    assert line == "return self.model(tokens) + self.model.decoder.embed_tokens.embedding[...].sum()"
    assert manual == []


@pytest.mark.parametrize(
    "read, decoder_setup",
    [
        ('self.model.decoder.embed.variables["params"]["embedding"]', PLAIN_INIT),  # no such submodule
        ('self.model.variables["params"]["decoder"]["embed"]["embedding"]', PLAIN_INIT),
        ('self.model.decoder.embed_tokens.variables["params"]["kernel"]', PLAIN_INIT),  # not its parameter
        ('self.model.decoder.embed_tokens.variables["cache"]["embedding"]', PLAIN_INIT),  # another collection
        # an initialiser that boxes the value (.variables gives the box), directly or through a local
        (
            'self.model.decoder.embed_tokens.variables["params"]["embedding"]',
            "        init = boxed(nn.initializers.normal())",
        ),
        # a local bound twice, or to another local: which initialiser is not one value
        (
            'self.model.decoder.embed_tokens.variables["params"]["embedding"]',
            "        init = nn.initializers.normal()\n        init = boxed(init)",
        ),
        (
            'self.model.decoder.embed_tokens.variables["params"]["embedding"]',
            "        other = boxed(nn.initializers.normal())\n        init = other",
        ),
    ],
)
def test_reads_the_plan_cannot_show_plainly_stay_a_finding(read, decoder_setup):
    line, manual = _migrated(read, decoder_setup)
    assert ".variables[" in line
    assert "L2N-VERIFY-003" in manual
