"""An @nn.compact Linen CNN for MNIST-shaped images: Conv, BatchNorm, Dropout, pooling, Dense."""

from flax import linen as nn


class CNN(nn.Module):
    """Two conv blocks with batch norm and average pooling, then a dense classifier."""

    features: tuple = (32, 64)
    hidden: int = 256
    num_classes: int = 10
    dropout_rate: float = 0.25

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Conv(features=self.features[0], kernel_size=(3, 3))(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
        x = nn.relu(x)
        x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
        x = nn.Conv(self.features[1], (3, 3))(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
        x = nn.relu(x)
        x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
        x = x.reshape((x.shape[0], -1))  # flatten
        x = nn.Dense(features=self.hidden)(x)
        x = nn.relu(x)
        x = nn.Dropout(rate=self.dropout_rate, deterministic=not train)(x)
        x = nn.Dense(features=self.num_classes)(x)
        return x
