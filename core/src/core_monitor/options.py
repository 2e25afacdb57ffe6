"""A backend's options, checked by the core against the annotations of its ``__init__``.

A backend's options are the keyword parameters of its ``__init__`` after ``run``; their
annotations are the contract::

    def __init__(self, run: RunInfo, *, quiet: bool = True, retries: int = 3,
                 mode: Literal["offline", "online"] = "offline", tags: Sequence[str] = ()):

``check_option_types`` reads them with ``typing.get_type_hints`` (a plugin's
``from __future__ import annotations`` included) and refuses a value of another type before
the backend is constructed, in the training process at ``Monitor()``, importing the plugin's
module but not its SDK. The types understood: ``bool``, ``int``, ``float``, ``str``,
``bytes``, ``None``, ``Any``, ``Literal[...]``, unions (``X | Y``, ``Optional``),
``pathlib.Path`` and ``os.PathLike`` (a ``str`` or a path object), ``Mapping[K, V]``/``dict``,
``Sequence[T]``/``list``/``tuple`` (a ``str`` is not a sequence of options), ``Collection``,
``Iterable``, ``Callable`` and any other class (``isinstance``). As in the core's own
checks, ``bool`` is not an ``int`` here, and ``float`` takes an ``int``. ``NonBlank`` (this
module) is a ``str`` with a character other than whitespace: ``tags: Sequence[NonBlank]``,
``project: NonBlank | None``. Values beyond types (ranges, formats) are the backend's optional
``check_options`` classmethod (``core_monitor.hookspecs.Backend.check_options``), called right
after.

An annotation that cannot be evaluated (a name imported only under ``TYPE_CHECKING``) leaves
that option unchecked; the contract kit's ``test_option_annotations_resolve`` names it.
"""

from __future__ import annotations

import collections.abc as abc
import inspect
import numbers
import os
import types
import typing
from collections.abc import Mapping
from pathlib import PurePath
from typing import Annotated, Any

from .errors import ConfigError

__all__ = ["NonBlank", "check_option_types", "option_types", "unresolved_options"]


class _NonBlankRule:
    """The marker ``NonBlank`` carries: the value has a character other than whitespace."""

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and bool(value.strip())

    def __repr__(self) -> str:
        return "non-blank"


#: An option type: a ``str`` with a character other than whitespace (a tag, a project name).
#: A type checker sees a ``str``; the core refuses ``""`` and ``"  "`` at ``Monitor()``, naming
#: the option, so a plugin writes no ``check_options`` for it.
NonBlank = Annotated[str, _NonBlankRule()]

_EMPTY = inspect.Parameter.empty
#: backend class -> (option -> (type, default)), read once per class and process.
_cache: dict[type, tuple[dict[str, tuple[Any, Any]], list[str]]] = {}


def option_types(cls: type) -> dict[str, tuple[Any, Any]]:
    """``{option: (type, default)}`` for the keyword parameters of ``cls.__init__`` after
    ``run`` whose annotation evaluates (``inspect.Parameter.empty`` marks no default; an
    option without an annotation has type ``Any``)."""
    return _read(cls)[0]


def unresolved_options(cls: type) -> list[str]:
    """``"option: annotation (error)"`` for each option whose annotation does not evaluate
    (so ``check_option_types`` cannot check it)."""
    return list(_read(cls)[1])


def check_option_types(name: str, cls: type, options: Mapping[str, Any]) -> None:
    """Check each value of ``options`` against its parameter's annotation.

    Args:
        name: the backend name, starting the message.
        cls: the backend class.
        options: the user's options (names already checked to be parameters).

    Raises:
        ConfigError: a value does not have its annotated type; the message names the
            backend, the option, the value and its type, what the annotation accepts and the
            fix, e.g. ``"trackio: option quiet='yes' (a str) must be True or False; e.g.
            quiet=True (the default, what leaving quiet out gives)"``.
    """
    types_ = option_types(cls)
    for option, value in options.items():
        if option not in types_:
            continue
        hint, default = types_[option]
        if _accepts(hint, value):
            continue
        fix = f"pass {describe(hint)} or leave {option} out"
        if default is not _EMPTY and _accepts(hint, default):
            fix = f"e.g. {option}={default!r} (the default, what leaving {option} out gives)"
        raise ConfigError(f"{name}: option {option}={value!r:.80} (a {type(value).__name__}) "
                          f"must be {describe(hint)}; {fix}")


def describe(hint: Any) -> str:
    """What values ``hint`` accepts, in words: ``"True or False"``, ``"an int"``,
    ``"one of 'a', 'b'"``, ``"a str or None"``."""
    parts = _describe_parts(hint)
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} or {parts[-1]}"


# Reading the annotations -----------------------------------------------------------------------


def _read(cls: type) -> tuple[dict[str, tuple[Any, Any]], list[str]]:
    if cls in _cache:
        return _cache[cls]
    try:
        params = list(inspect.signature(cls).parameters.values())[1:]  # after `run`
    except (TypeError, ValueError):  # no signature to read: nothing to check
        params = []
    init = inspect.unwrap(getattr(cls, "__init__", None) or (lambda: None))
    namespace = dict(getattr(init, "__globals__", {}))
    found: dict[str, tuple[Any, Any]] = {}
    unresolved: list[str] = []
    for param in params:
        if param.kind not in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD):
            continue
        annotation = param.annotation
        if annotation is _EMPTY:
            found[param.name] = (Any, param.default)
            continue
        try:
            found[param.name] = (_evaluate(annotation, namespace), param.default)
        except Exception as error:  # NameError for a TYPE_CHECKING-only name, SyntaxError
            unresolved.append(f"{param.name}: {annotation} ({type(error).__name__}: {error})")
    _cache[cls] = (found, unresolved)
    return found, unresolved


def _evaluate(annotation: Any, namespace: dict[str, Any]) -> Any:
    """``annotation`` evaluated as ``typing.get_type_hints`` does (a string included)."""

    def holder() -> None:
        pass

    holder.__annotations__ = {"option": annotation}
    return typing.get_type_hints(holder, globalns=namespace, include_extras=True)["option"]


# Matching a value -------------------------------------------------------------------------------

_SEQUENCES = (abc.Sequence, abc.MutableSequence, list, tuple, abc.Collection, abc.Iterable,
              abc.Set, abc.MutableSet, set, frozenset)
_MAPPINGS = (abc.Mapping, abc.MutableMapping, dict)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or type(value).__name__ == "bool_"  # numpy.bool_


def _accepts(hint: Any, value: Any) -> bool:
    if hint is Any or isinstance(hint, typing.TypeVar):
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        return any(_accepts(arg, value) for arg in args)
    if origin is typing.Literal:
        return any(type(value) is type(arg) and value == arg for arg in args)
    if origin is typing.Annotated:
        return _accepts(args[0], value) and all(
            rule.accepts(value) for rule in args[1:] if isinstance(rule, _NonBlankRule))
    if hint is bool:
        return _is_bool(value)
    if hint is int:
        return isinstance(value, numbers.Integral) and not _is_bool(value)
    if hint is float:
        return isinstance(value, numbers.Real) and not _is_bool(value)
    if hint is complex:
        return isinstance(value, numbers.Complex) and not _is_bool(value)
    if hint is str:
        return isinstance(value, str)
    if isinstance(hint, type) and (issubclass(hint, PurePath) or hint is os.PathLike):
        return isinstance(value, (str, os.PathLike))
    if origin is os.PathLike:
        return isinstance(value, (str, os.PathLike))
    container = origin or hint
    if container in _MAPPINGS:
        if not isinstance(value, Mapping):
            return False
        if len(args) == 2:
            return all(_accepts(args[0], k) and _accepts(args[1], v) for k, v in value.items())
        return True
    if container in _SEQUENCES:
        if isinstance(value, (str, bytes)) or not isinstance(value, container):
            return False
        if container is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            return len(value) == len(args) and all(map(_accepts, args, value))
        return not args or all(_accepts(args[0], item) for item in value)
    if container is abc.Callable:
        return callable(value)
    if origin is type:
        return isinstance(value, type) and (not args or not isinstance(args[0], type)
                                            or issubclass(value, args[0]))
    if isinstance(container, type):
        try:
            return isinstance(value, container)
        except TypeError:  # a generic alias isinstance cannot check: accept
            return True
    return True  # a form this module does not know (a Protocol, NewType): not checked here


def _describe_parts(hint: Any) -> list[str]:
    if hint is Any:
        return ["anything"]
    if hint is None or hint is type(None):
        return ["None"]
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        parts: list[str] = []
        for arg in args:
            parts += [p for p in _describe_parts(arg) if p not in parts]
        none = [p for p in parts if p == "None"]
        return [p for p in parts if p != "None"] + none  # "a str or None", None last
    if origin is typing.Literal:
        return [f"one of {', '.join(map(repr, args))}"] if len(args) > 1 else [repr(args[0])]
    if origin is typing.Annotated:
        if args[0] is str and any(isinstance(rule, _NonBlankRule) for rule in args[1:]):
            return ["a non-blank str"]
        return _describe_parts(args[0])
    if hint is bool:
        return ["True", "False"]
    if hint is int:
        return ["an int"]
    if hint is float:
        return ["a number (int or float)"]
    if hint is str:
        return ["a str"]
    if (isinstance(hint, type) and (issubclass(hint, PurePath) or hint is os.PathLike)) or (
        origin is os.PathLike
    ):
        return ["a path (str or os.PathLike)"]
    container = origin or hint
    if container in _MAPPINGS:
        if len(args) == 2 and args[1] is not Any:
            return [f"a mapping of {_bare(args[0])} to {_bare(args[1])}"]
        if len(args) == 2 and args[0] is not Any:
            return [f"a mapping with {_bare(args[0])} keys"]
        return ["a mapping"]
    if container in _SEQUENCES:
        if args and args[0] is not Any and args[0] is not Ellipsis:
            return [f"a list of {_bare(args[0])}"]
        return ["a list"]
    if container is abc.Callable:
        return ["a callable"]
    name = getattr(hint, "__qualname__", None) or str(hint)
    return [f"a {name}"]


def _bare(hint: Any) -> str:
    """``describe(hint)`` without its article, for "a list of str"."""
    text = describe(hint)
    for article in ("a ", "an "):
        if text.startswith(article):
            return text[len(article):]
    return text
