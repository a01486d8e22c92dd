"""The exception tg.tensor's ops raise for arguments they cannot take.

torch raises RuntimeError for a bad shape, dim or mode (`matmul` of mismatched shapes, `permute` with a repeated dim),
tinygrad raises RuntimeError or ValueError, and Python code expects ValueError for a bad value: `ArgumentError` is
all of these, so code written against any of them catches it.
"""

from __future__ import annotations


class ArgumentError(ValueError, RuntimeError):
    """An argument an op cannot take (shapes that do not fit, a bad dim, mode or size), named in the message."""


class DTypeError(TypeError, RuntimeError):
    """An op applied to a dtype it does not support (a shift of floats), named in the message."""


class DimError(IndexError, ArgumentError):
    """A dim that does not exist for the tensor (an IndexError, as torch and tinygrad raise; also ArgumentError)."""


class UnsupportedMode(NotImplementedError, ArgumentError):
    """A mode name an op does not know (`pad(mode="typo")`): NotImplementedError as tinygrad, also ValueError."""


class ShapeTypeError(TypeError, ArgumentError):
    """A shape entry that is not an int (a TypeError; a ValueError too, as tinygrad raises for bad shapes)."""
