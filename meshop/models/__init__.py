"""Neural operators: ``model(batch) -> [total query nodes, out_channels]``."""

__all__: list[str] = []
