"""The gan backend's options: the spec's one complete, frozen model
(:class:`dpql.spec.models.GanOptions`), so every option error has the spec's line and column.
All hyper-parameters are public; none is derived from data."""

from dpql.spec.models import GanOptions

__all__ = ["GanOptions"]
