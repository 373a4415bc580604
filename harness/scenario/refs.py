"""How a file names nodes and links: node lists or counts, `all`, and X->Y, X<->Y or "*" links,
resolved against the scenario's nodes (kept in the validation context)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    Field,
    PlainValidator,
    Strict,
    TypeAdapter,
    ValidationInfo,
)

from splitbrain.harness.scenario.vocabulary import (
    MAX_NODES,
)
from splitbrain.harness.validation import (
    Problems,
    context,
    problem,
    type_name,
    validate_part,
)

NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)*$")
CHECK_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_RESERVED_NAMES = frozenset({"all", "harness", "node"})


# ---- the file, as pydantic models -------------------------------------------------------------
#
# The models below describe the file as written (and give its JSON Schema); validators resolve
# what the runners use (node names, directed links, Stream, FaultStep). ScenarioFile's fields are
# validated in order and later ones read what earlier ones resolved from the validation context:
# nodes, config, duration, checks, the schedule. harness/validation.py says how problems are
# reported. Paths use the indexes as written in the file.


def _known_node(name: str, info: ValidationInfo) -> str:
    nodes = context(info).get("nodes")
    if nodes is not None and name not in nodes:
        raise problem(f"unknown node {name!r} (nodes: {', '.join(nodes)})")
    return name


NodeRef = Annotated[str, Strict(), Field(min_length=1), AfterValidator(_known_node)]
NODE = TypeAdapter(NodeRef)
NODE_LIST = TypeAdapter(list[NodeRef])


def _node_names(raw: Any, info: ValidationInfo) -> tuple[str, ...]:
    if isinstance(raw, int) and not isinstance(raw, bool):
        if not 1 <= raw <= MAX_NODES:
            raise problem(f"a node count must be between 1 and {MAX_NODES}")
        names: tuple[str, ...] = tuple(node_letters(i) for i in range(raw))
    elif not isinstance(raw, list) or not raw:
        raise problem("must be a non-empty list of names or a count")
    else:
        problems = Problems()
        seen: list[str] = []
        for i, n in enumerate(raw):
            if not isinstance(n, str) or not n:
                problems.add(f"must be a non-empty string, got {type_name(n)} {n!r}", i)
            elif not NAME_RE.match(n) or n.lower() in _RESERVED_NAMES:
                problems.add(
                    f"{n!r} is not a valid node name (letters, digits, '_', inner '-'; not 'all', 'harness' or 'node')",
                    i,
                )
            elif n in seen:
                problems.add(f"{n!r} is listed twice", i)
            seen.append(n)
        problems.raise_any()
        names = tuple(raw)
    context(info)["nodes"] = names
    return names


def node_letters(i: int) -> str:
    if i < 26:
        return chr(ord("A") + i)
    return chr(ord("A") + i // 26 - 1) + chr(ord("A") + i % 26)


NodeNames = Annotated[
    tuple[str, ...],
    PlainValidator(
        _node_names,
        json_schema_input_type=Union[
            Annotated[int, Field(ge=1, le=MAX_NODES)],
            Annotated[list[Annotated[str, Field(pattern=NAME_RE.pattern)]], Field(min_length=1)],
        ],
    ),
]


def _nodes_or_all(raw: Any, info: ValidationInfo) -> tuple[str, ...]:
    if raw == "all":
        return tuple(context(info).get("nodes", ()))
    if not isinstance(raw, list):
        return (validate_part(NODE, raw, info),)
    if not raw:
        raise problem("must name at least one node")
    return tuple(validate_part(NODE_LIST, raw, info))


NodesOrAll = Annotated[
    tuple[str, ...],
    PlainValidator(
        _nodes_or_all, json_schema_input_type=Union[Literal["all"], str, Annotated[list[str], Field(min_length=1)]]
    ),
]

Links = tuple[tuple[str, str], ...]


def _link(raw: Any, info: ValidationInfo) -> tuple[str, Links]:
    """Resolve "X->Y", "X<->Y" or "*" (and "X->*", "*->Y") into directed links."""
    if not isinstance(raw, str) or not raw:
        raise problem(f"must be a non-empty string, got {type_name(raw)} {raw!r}")
    spec = raw.strip()
    nodes = tuple(context(info).get("nodes", ()))
    if spec == "*":
        return spec, tuple((a, b) for a in nodes for b in nodes if a != b)
    both = "<->" in spec
    parts = [part.strip() for part in spec.split("<->" if both else "->")]
    if len(parts) != 2 or not all(parts):
        raise problem(f'{spec!r} is not a link (use X->Y, X<->Y or "*")')
    srcs = nodes if parts[0] == "*" else (validate_part(NODE, parts[0], info),)
    dsts = nodes if parts[1] == "*" else (validate_part(NODE, parts[1], info),)
    links = [(x, y) for x in srcs for y in dsts if x != y]
    if both:
        links += [(y, x) for x, y in links if (y, x) not in links]
    if not links and nodes:
        raise problem(f"{spec!r} names no link between two different nodes")
    return spec, tuple(links)


Link = Annotated[
    tuple[str, Links],
    PlainValidator(
        _link,
        json_schema_input_type=Annotated[
            str, Field(description='X->Y (one way), X<->Y (both ways) or "*" (every link); X->* and *->Y too')
        ],
    ),
]
