"""tg.tensor.nn: layers (placeholder while the layers land)."""
