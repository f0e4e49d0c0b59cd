"""A setup()-style Linen MLP classifier: Dense layers, Dropout and activations."""

import flax.linen as nn


class MLP(nn.Module):
    """Two hidden layers with dropout, then a linear head."""

    hidden: int
    num_classes: int
    dropout_rate: float = 0.1

    def setup(self):
        self.dense1 = nn.Dense(self.hidden)
        self.dropout = nn.Dropout(rate=self.dropout_rate)
        self.dense2 = nn.Dense(self.hidden, use_bias=True)
        self.head = nn.Dense(self.num_classes, name="head")

    def __call__(self, x, *, train: bool = False):
        x = nn.gelu(self.dense1(x))
        x = self.dropout(x, deterministic=not train)
        x = nn.relu(self.dense2(x))
        x = self.dropout(x, deterministic=not train)
        return self.head(x)
