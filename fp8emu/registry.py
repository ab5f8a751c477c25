"""A name -> object registry with protected built-ins (formats and profiles use one each)."""

from __future__ import annotations

__all__ = ["Registry", "named"]


def named(obj, cls, table, kind, cls_path):
    """``obj`` itself when it is a ``cls``, else ``table[obj]``; a ValueError listing the names otherwise.

    The one look-up of "a name or the object itself" (accumulators, instructions, attention recipes).

    Examples
    --------
    >>> named("two", int, {"two": 2}, "number", "int"), named(5, int, {"two": 2}, "number", "int")
    (2, 5)
    >>> named("three", int, {"two": 2}, "number", "int")
    Traceback (most recent call last):
    ...
    ValueError: unknown number 'three'; use one of ['two'] or an int
    """
    if isinstance(obj, cls):
        return obj
    if isinstance(obj, str) and obj in table:
        return table[obj]
    raise ValueError(f"unknown {kind} {obj!r}; use one of {sorted(table)} or an {cls_path}")


class Registry(dict):
    """Objects by their ``name``; built-ins cannot be replaced, user entries only on request.

    Parameters
    ----------
    kind : str
        What is registered (``"format"``, ``"profile"``), used in messages.
    cls : type
        The type every entry must have.
    builtins : iterable
        The built-in objects, in listing order.

    Examples
    --------
    >>> from collections import namedtuple
    >>> Thing = namedtuple("Thing", "name")
    >>> r = Registry("thing", Thing, [Thing("a")])
    >>> r.register(Thing("b")).name, list(r)
    ('b', ['a', 'b'])
    >>> r.lookup("c")
    Traceback (most recent call last):
    ...
    ValueError: unknown thing 'c'; valid things: a, b
    """

    def __init__(self, kind: str, cls: type, builtins):
        super().__init__((obj.name, obj) for obj in builtins)
        self.kind = kind
        self.cls = cls
        self.builtin_names = frozenset(self)

    def register(self, obj, *, replace: bool = False):
        """Add ``obj`` under ``obj.name`` and return it (see the class docstring for the rules)."""
        if not isinstance(obj, self.cls):
            raise TypeError(f"register_{self.kind} expects a {self.cls.__name__}, got {type(obj).__name__}")
        if obj.name in self.builtin_names or (obj.name in self and not replace):
            raise ValueError(f"a {self.kind} named {obj.name!r} is already registered")
        self[obj.name] = obj
        return obj

    def lookup(self, name: str):
        """The entry called ``name``; a ValueError listing the valid names otherwise."""
        try:
            return self[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; valid {self.kind}s: {', '.join(self)}") from None
