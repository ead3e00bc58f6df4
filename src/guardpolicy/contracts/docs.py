"""docs/data-contracts.md's column tables, rendered from the contracts (`guardpolicy contracts`).

The page is prose written by hand; each table contract's column table sits between
``<!-- contract:<name> -->`` and ``<!-- /contract -->`` (the contract's name: its artifact, e.g. ``pool``, or
``analysis_table:scores`` where one template holds several tables) and is rewritten from
`guardpolicy.contracts.catalog.CONTRACTS` by ``guardpolicy contracts --write-docs``. ``guardpolicy contracts``
alone checks the page is current (a unit test does too).
No stage imports this module: rewording the page never reruns one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from guardpolicy.contracts.catalog import CONTRACTS
from guardpolicy.contracts.model import Column, Contract
from guardpolicy.errors import ConfigError
from guardpolicy.layout import Layout

DOC = "docs/data-contracts.md"  # relative to the repository root
BLOCK = re.compile(
    r"<!-- contract:(?P<artifact>[A-Za-z0-9_:]+) -->\n(?P<body>.*?)<!-- /contract -->", re.DOTALL
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(contract: Contract, contracts: Mapping[str, Contract] = CONTRACTS) -> str:
    """The Markdown between the contract's markers: rows and key, then one table row per column or family."""
    key = " + ".join(f"`{name}`" for name in contract.key)
    lines = [f"Rows: {_cell(contract.rows)}." + (f" Unique: {key}." if key else "")]
    if contract.like is not None:
        template = contracts[contract.like].template
        lines.append(f"Columns: those of `{template}` (contract `{contract.like}`).")
        return "\n".join(lines) + "\n"
    lines += ["", "| column | type | meaning |", "|---|---|---|"]
    for entry in contract.entries:
        if isinstance(entry, Column):
            name, dtype = f"`{entry.name}`", entry.dtype
        else:
            name, dtype = f"`{entry.pattern}`", " or ".join(entry.dtypes)
        kind = dtype + (", nullable" if entry.nullable else "")
        lines.append(f"| {name} | {_cell(kind)} | {_cell(entry.meaning)} |")
    return "\n".join(lines) + "\n"


def rendered(text: str, contracts: Mapping[str, Contract] = CONTRACTS) -> str:
    """`text` with every contract block rewritten; a block naming no contract is a ConfigError."""

    def block(match: re.Match[str]) -> str:
        artifact = match.group("artifact")
        if artifact not in contracts:
            raise ConfigError(
                f"{DOC}: <!-- contract:{artifact} --> names no contract; known: {sorted(contracts)}"
            )
        return f"<!-- contract:{artifact} -->\n{render(contracts[artifact], contracts)}<!-- /contract -->"

    return BLOCK.sub(block, text)


def blocks(text: str) -> list[str]:
    """The artifacts whose blocks the page holds, in page order."""
    return [match.group("artifact") for match in BLOCK.finditer(text)]


def contracts(write_docs: bool = False, layout: Layout | None = None) -> str:
    """`guardpolicy contracts`: check that docs/data-contracts.md's column tables match the contracts (exit
    status 2 naming what differs); with --write-docs, rewrite them."""
    layout = layout or Layout.discover()
    path = layout.root / DOC
    text = path.read_text(encoding="utf-8")
    found = blocks(text)
    absent = [name for name in CONTRACTS if name not in found]
    repeated = sorted({name for name in found if found.count(name) > 1})
    if absent or repeated:
        raise ConfigError(
            f"{DOC}: every table contract needs exactly one <!-- contract:<artifact> --> block; "
            f"absent {absent}, repeated {repeated}"
        )
    new = rendered(text)
    if write_docs:
        if new != text:
            Path(path).write_text(new, encoding="utf-8")
            return f"rewrote the column tables of {DOC}"
        return f"{DOC}: column tables current"
    if new != text:
        stale = [m.group("artifact") for m in BLOCK.finditer(text) if rendered(m.group(0)) != m.group(0)]
        raise ConfigError(
            f"{DOC}: the column tables of {stale} differ from guardpolicy.contracts "
            "(`guardpolicy contracts --write-docs` rewrites them)"
        )
    return f"{DOC}: the column tables of all {len(CONTRACTS)} table contracts are current"
