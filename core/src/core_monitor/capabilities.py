"""``Capabilities``: what a backend class declares about itself, in one class attribute.

A backend declares every capability at once::

    class MyMonitor:
        capabilities: ClassVar[Capabilities] = Capabilities(
            name="my", stores_config=True, supports_resume=True, tested_sdk="mysdk>=1.2,<1.4",
        )

and the core (media routing, resume, ``monitors copy``, the SDK checks) and the contract kit
(``core_monitor.testing``) read it through ``Capabilities.of(cls)``. It is the only way to
declare one: a class attribute per capability (``stores_config = True`` in the class body, the
way before this declaration) is a ``TypeError`` naming the ``Capabilities(...)`` to write
instead; a subclass changing one capability declares its own
(``capabilities = dataclasses.replace(Base.capabilities, media_kinds=frozenset())``).

Every field is also set on the class under its own name when the class is created
(``MyMonitor.stores_config``), a read-only mirror for code reading a class's attributes
(``backend_name``, the writer process's media routing).

Nothing here imports pluggy or an SDK: ``monitors list`` and the metadata checks read it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from .media import MEDIA_KINDS

__all__ = ["CAPABILITY_VALUES", "LARGEST_STEP", "Capabilities", "sdk_distribution"]

#: Accepted values of each capability with a closed set of values, the first one the default.
CAPABILITY_VALUES: dict[str, tuple[Any, ...]] = {
    "rows_readable_after": ("flush", "close"),
    "durable_after": ("flush", "close"),
    "value_dtype": ("float64", "float32"),
    "stores_config": (False, True),
    "supports_resume": (False, True),
    "repeated_steps": ("all", "first"),
    "history": ("all", "latest"),
}
#: The largest step the contract asks a backend to store: int64's largest, the widest step
#: field of the first-party trackers (TensorBoard, wandb, MLflow).
LARGEST_STEP = 2**63 - 1

#: A PEP 508 requirement's distribution name (what ``tested_sdk`` starts with).
_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")


@dataclass(frozen=True)
class Capabilities:
    """What a backend class declares about its storage and its SDK.

    Construct it with keywords in the class body (``capabilities: ClassVar[Capabilities] =
    Capabilities(name="csv", stores_config=True)``); every field is optional.

    Attributes:
        name: the backend name when the class is passed to ``Monitor`` directly (an installed
            backend is known by its entry-point name); ``None``: the class's ``__name__``.
        rows_readable_after: ``"flush"`` when the backend's own reader sees every row after
            ``monitor_flush`` while the run is open; ``"close"`` when only after
            ``monitor_close`` (an SDK without a flush, like wandb's offline writer).
        durable_after: ``"flush"`` when every row handed to the backend before a
            ``monitor_flush`` that returned is in its storage, and survives a kill of its
            process (its journal cursor moves at each flush: ``core_monitor.journal``);
            ``"close"`` when only a ``monitor_close`` makes sure of it (an SDK that writes
            from a thread of its own and has no flush, like SwanLab): its cursor moves at close
            alone, and after a kill ``monitors sync`` delivers what its storage lacks.
        value_dtype: ``"float64"`` when values are stored exactly; ``"float32"`` when the
            storage rounds them to single precision (TensorBoard event files).
        stores_config: whether the backend stores ``RunInfo.config`` at start and merges what
            ``monitor_config`` brings later, readable back by the plugin's ``read_config``.
        media_kinds: the media kinds ``monitor_write_media`` stores, a subset of
            ``{"image", "histogram", "text"}`` (``core_monitor.media.MEDIA_KINDS``); the core
            sends the backend only these and reports the others once per kind. Empty (the
            default): scalars only. Any iterable of ``str`` is accepted; it is kept as a
            ``frozenset``.
        supports_resume: whether ``run.resume`` (``"allow"``/``"must"``) continues an earlier
            run (``core_monitor.resume`` says what the backend then does).
        repeated_steps: ``"all"`` (the contract) when every value logged for a tag is
            stored, a second one at the same step included; ``"first"`` when the tracker keeps
            one value per tag and step, the first (SwanLab): the backend does not send the
            later ones and warns once per tag (``RuntimeWarning``), the kit expects exactly that,
            and ``monitors copy`` does not send them (it says so).
        history: ``"all"`` (the contract) when every point logged is stored; ``"latest"``
            when the backend keeps only the latest point of each tag, its step beside it (an
            exporter whose values a scraper samples, as Prometheus does): the kit then expects,
            per tag, the last point logged, and cannot see whether the earlier ones were
            stored (``monitors copy`` from it copies the latest points only).
        max_step: the largest step the tracker stores (default ``LARGEST_STEP``, ``2**63 - 1``);
            a tracker with a narrower step field (SwanLab: ``2**48 - 1``) declares it: the
            backend does not send points beyond it and warns once per tag, the kit expects
            exactly that, and ``monitors copy`` does not send them (it says so).
        tested_sdk: the SDK versions the plugin is tested with, a PEP 508 requirement
            (``"mysdk>=1.2,<1.4"``); ``None`` for a backend without an SDK. Before the backend is
            constructed the core checks, from metadata alone, that the distribution it names is
            installed (else ``BackendLoadError`` naming it and ``pip install``); outside the
            range it warns once (``SdkVersionWarning``) unless ``check_sdk`` reports a problem
            (``core_monitor.sdk``).

    Raises:
        TypeError: (construction) a field has a value outside ``CAPABILITY_VALUES``, ``name``
            is not a non-empty ``str``, ``media_kinds`` names an
            unknown kind, ``max_step`` is not an int from 1 to ``2**63 - 1``, or ``tested_sdk``
            names no distribution. The message names the field,
            the value and the accepted values.
    """

    name: str | None = None
    rows_readable_after: Literal["flush", "close"] = "flush"
    durable_after: Literal["flush", "close"] = "flush"
    value_dtype: Literal["float64", "float32"] = "float64"
    stores_config: bool = False
    media_kinds: frozenset[str] = field(default_factory=frozenset)
    supports_resume: bool = False
    tested_sdk: str | None = None
    repeated_steps: Literal["all", "first"] = "all"
    history: Literal["all", "latest"] = "all"
    max_step: int = LARGEST_STEP

    def __post_init__(self) -> None:
        kinds = _checked_fields(self, "Capabilities(", "=", ")")
        object.__setattr__(self, "media_kinds", kinds)

    def __set_name__(self, owner: type, attribute: str) -> None:
        """Mirror every field onto ``owner`` under its own name (``owner.stores_config``)."""
        if attribute != "capabilities":
            return
        both = sorted(f for f in _FIELDS if f in vars(owner))
        if both:
            raise TypeError(f"{owner.__qualname__} declares {', '.join(both)} both as a class "
                            "attribute and in its capabilities; declare each capability once, "
                            "in capabilities = Capabilities(...)")
        for name in _FIELDS:
            setattr(owner, name, getattr(self, name))

    @classmethod
    def of(cls, backend_class: type) -> Capabilities:
        """The capabilities of ``backend_class``: the ``capabilities`` attribute the nearest
        class of its MRO declares; ``Capabilities()`` (every default) when none does.

        Raises:
            TypeError: ``capabilities`` is not a ``Capabilities``, or a class declares a
                capability as a class attribute (``stores_config = True``, the way before
                ``Capabilities``); the message names the class, the attributes and the
                ``Capabilities(...)`` to write instead.
        """
        for klass in backend_class.__mro__:
            own = vars(klass)
            if "capabilities" in own:
                declared = own["capabilities"]
                if not isinstance(declared, Capabilities):
                    raise TypeError(f"{backend_class.__qualname__}.capabilities = "
                                    f"{declared!r:.80} must be a core_monitor.Capabilities(...)")
                return declared
            old = {name: own[name] for name in _FIELDS if name in own and name != "name"}
            if old:
                fields = ", ".join(f"{name}={value!r}" for name, value in sorted(old.items()))
                raise TypeError(
                    f"{klass.__qualname__} declares {', '.join(sorted(old))} as class "
                    "attributes, which the core no longer reads; declare them in one place: "
                    f"capabilities: ClassVar[Capabilities] = Capabilities({fields}) (a subclass: "
                    "dataclasses.replace(Base.capabilities, ...)). See core_monitor.Capabilities"
                )
        return _DEFAULT

    @property
    def sdk(self) -> str | None:
        """The SDK distribution ``tested_sdk`` names (``"trackio"``), or ``None``."""
        return sdk_distribution(self.tested_sdk)


#: The field names, in declaration order.
_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Capabilities))


def sdk_distribution(requirement: str | None) -> str | None:
    """The distribution name a PEP 508 requirement starts with (``"mysdk>=1.2"`` ->
    ``"mysdk"``), read without ``packaging``; ``None`` for ``None`` or a blank string."""
    if requirement is None or not requirement.strip():
        return None
    found = _REQUIREMENT_NAME.match(requirement)
    return found.group(1) if found else None


def _checked_fields(caps: Capabilities, before: str, equals: str,
                    after: str) -> frozenset[str]:
    """Check every field of ``caps``; return ``media_kinds`` as a frozenset.

    ``before``/``equals``/``after`` frame a field in a message: ``Capabilities(field=value)``
    or ``MyMonitor.field = value`` (a class attribute)."""
    for attribute, accepted in CAPABILITY_VALUES.items():
        value = getattr(caps, attribute)
        if value not in accepted or type(value) is not type(accepted[0]):
            raise TypeError(
                f"{before}{attribute}{equals}{value!r}{after} is not one of "
                f"{', '.join(map(repr, accepted))}; set it to one of them "
                "(see core_monitor.Capabilities)"
            )
    if caps.name is not None and (not isinstance(caps.name, str) or not caps.name):
        raise TypeError(f"{before}name{equals}{caps.name!r}{after} must be a non-empty str "
                        "(the backend name) or unset")
    top = caps.max_step
    if type(top) is not int or not 0 < top <= LARGEST_STEP:
        raise TypeError(f"{before}max_step{equals}{top!r}{after} must be an int from 1 to "
                        f"2**63 - 1 (the largest step the tracker stores)")
    tested = caps.tested_sdk
    if tested is not None and (not isinstance(tested, str) or sdk_distribution(tested) is None):
        raise TypeError(f"{before}tested_sdk{equals}{tested!r}{after} must be a PEP 508 "
                        "requirement such as 'mysdk>=1.2,<1.4', or None for no SDK")
    kinds: Any = caps.media_kinds
    if isinstance(kinds, str) or not _is_iterable(kinds) or not all(
        isinstance(k, str) for k in kinds
    ) or (set(kinds) - MEDIA_KINDS):
        raise TypeError(f"{before}media_kinds{equals}{kinds!r}{after} must be a set of str out of "
                        f"{sorted(MEDIA_KINDS)}")
    return frozenset(kinds)


def _is_iterable(value: Any) -> bool:
    try:
        iter(value)
    except TypeError:
        return False
    return True


#: What a class declaring nothing has.
_DEFAULT = Capabilities()
