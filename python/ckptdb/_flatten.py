"""Nested state dicts as flat, dotted FQNs (the convention of
``torch.distributed.checkpoint``): ``{"model": {"layers": [{"w": t}]}}``
holds ``"model.layers.0.w"``.

Dicts are walked (keys become text with ``str``); lists and tuples are walked
when they hold a tensor or array somewhere inside, and are otherwise one
value (``[0.9, 0.999]`` is one object entry). Everything else is a leaf.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

Setter = Callable[[Any], None]


def _is_array(value: Any) -> bool:
    from . import _state
    return _state.is_array(value)


def _holds_array(value: Any) -> bool:
    if _is_array(value):
        return True
    if isinstance(value, dict):
        return any(_holds_array(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_array(v) for v in value)
    return False


def flatten(state_dict: Any) -> Iterator[tuple[str, Any, Setter | None]]:
    """Yields (fqn, leaf, setter) in order; setter(v) replaces the leaf in
    its container (None where the container is a tuple). Raises TypeError
    when the top level is not a dict and ValueError for an empty key."""
    if not isinstance(state_dict, dict):
        raise TypeError(f"state_dict must be a dict, not {type(state_dict).__name__}")
    yield from _walk(state_dict, "")


def _walk(container: Any, prefix: str) -> Iterator[tuple[str, Any, Setter | None]]:
    items = container.items() if isinstance(container, dict) else enumerate(container)
    for key, value in items:
        name = str(key)
        if name == "":
            raise ValueError(f"state_dict: an empty key inside '{prefix or '<top level>'}'")
        fqn = prefix + name
        if isinstance(value, dict) and value:
            yield from _walk(value, fqn + ".")
        elif isinstance(value, (list, tuple)) and value and _holds_array(value):
            yield from _walk(value, fqn + ".")
        else:
            yield fqn, value, _setter(container, key)


def _setter(container: Any, key: Any) -> Setter | None:
    if isinstance(container, tuple):
        return None

    def put(value: Any) -> None:
        container[key] = value
    return put
