"""Reading a profile's YAML defensively: size, alias, depth and encoding limits, and the
line every mapping key came from.

Profiles are written by other teams and fed to CI jobs, so the reader refuses what could
hang or exhaust the machine before building any Python object:

* files over ``MAX_BYTES`` (1 MiB: the largest built-in is a few kB);
* more than ``MAX_ALIASES`` aliases, or aliases that expand past ``MAX_NODES`` nodes
  (the "billion laughs" bomb: 800 bytes that expand to 10^9 strings);
* nesting deeper than ``MAX_DEPTH`` (Python recursion ends in a traceback otherwise);
* bytes that are not UTF-8 text.

``read_yaml_text`` returns the data and ``{key path: line}`` so validation errors can name
the line a value came from. Every refusal is a :class:`ProfileTextError` with one line.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from workload.errors import ProfileTextError

MAX_BYTES = 1 << 20
MAX_ALIASES = 100
MAX_DEPTH = 64
MAX_NODES = 100_000

Lines = dict[tuple[str, ...], int]


class _Loader(yaml.SafeLoader):
    """SafeLoader that counts aliases and nesting while composing (before any expansion)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:  # type: ignore[override]
        if self.check_event(AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark
                raise ProfileTextError(
                    f"line {mark.line + 1}: more than {MAX_ALIASES} YAML aliases (refused: "
                    "alias expansion can exhaust memory)"
                )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ProfileTextError(
                    f"line {mark.line + 1}: nested deeper than {MAX_DEPTH} levels"
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def decode(data: bytes) -> str:
    """UTF-8 text of ``data`` (a BOM is dropped); ProfileTextError naming the first bad byte."""
    if len(data) > MAX_BYTES:
        raise ProfileTextError(f"larger than {MAX_BYTES // 1024} KiB (a profile is a few kB)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ProfileTextError(
            f"line {line}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
        ) from None


def read_yaml_text(text: str) -> tuple[Any, Lines]:
    """Parse one YAML document within the limits; return (data, {key path: 1-based line}).

    Raises ProfileTextError for a limit and yaml.YAMLError for a syntax error.
    """
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise ProfileTextError(f"larger than {MAX_BYTES // 1024} KiB (a profile is a few kB)")
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise ProfileTextError(f"nested deeper than {MAX_DEPTH} levels") from None
        if node is None:
            return None, {}
        lines: Lines = {}
        _walk(node, (), lines, [0])
        return loader.construct_document(node), lines
    finally:
        loader.dispose()


def _walk(node: Node, path: tuple[str, ...], lines: Lines, count: list[int]) -> None:
    """Record key lines; count nodes with aliases expanded so a bomb stops here, early."""
    count[0] += 1
    if count[0] > MAX_NODES:
        raise ProfileTextError(
            f"line {node.start_mark.line + 1}: expands to more than {MAX_NODES} YAML nodes "
            "(an alias bomb?)"
        )
    if isinstance(node, MappingNode):
        for k, v in node.value:
            key = str(k.value) if isinstance(k, ScalarNode) else "?"
            sub = (*path, key)
            lines.setdefault(sub, k.start_mark.line + 1)
            _walk(v, sub, lines, count)
    elif isinstance(node, SequenceNode):
        for i, v in enumerate(node.value):
            sub = (*path, str(i))
            lines.setdefault(sub, v.start_mark.line + 1)
            _walk(v, sub, lines, count)
