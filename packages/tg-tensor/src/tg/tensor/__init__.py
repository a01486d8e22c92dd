"""tg.tensor: the user API: Tensor, autograd, nn, optimizers and state loading."""

from tg.tensor.__about__ import __version__

__all__ = ["__version__"]
