"""Reading public and user pool sources: acquire their files, read records, map records to candidates.

`acquire_files` gets each file's verified bytes (mirror first, then the pinned download) and says why a
public file cannot be had; `read_file_records` reads a file in any declared layout; `candidates_from_records`
turns records into `Candidate`s by the source's prompt template, row filters, fact rules and pillar maps.
Public data quirks (an empty prompt, a row no fact rule covers) are skipped and counted; the user's own file
is held to stricter rules, and a bad row there is an InputError naming the file, the row and the field. A
user file of format `dataset` (a Hugging Face dataset, guardpolicy.data.hub_datasets) gives its rows to the
same mapping and checks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardpolicy.contracts import POOL
from guardpolicy.data.acquire import LocalFile, Unavailable, download, from_mirror
from guardpolicy.data.hub_datasets import LoadedDataset, load_dataset_rows
from guardpolicy.data.readers import Records, read_json_document, read_records, records_from_objects
from guardpolicy.errors import ChecksumError, InputError
from guardpolicy.io import sha256_file
from guardpolicy.pool.registry import PoolFile, PoolSource, template_fields
from guardpolicy.pool.rows import Candidate, stripped

IMPORT_PREFIX = POOL.family("label").prefix  # a user source's label columns: import_<label>
_MISSING = object()
_FIELD = re.compile(r"\{([^{}]+)\}")


@dataclass
class LoadCounts:
    """Why rows of a source did not become candidates (reported per source in reports/pool.json)."""

    rows_read: int = 0
    filtered_out: int = 0
    empty_prompt: int = 0
    no_matching_fact_rule: int = 0
    candidates: int = 0

    def add(self, other: LoadCounts) -> None:
        self.rows_read += other.rows_read
        self.filtered_out += other.filtered_out
        self.empty_prompt += other.empty_prompt
        self.no_matching_fact_rule += other.no_matching_fact_rule
        self.candidates += other.candidates


# ------------------------------------------------------------------------------------------------ acquiring


def acquire_files(
    source: PoolSource,
    *,
    mirror_dir: Path,
    allow_download: bool,
    timeout_s: float,
    work_dir: Path,
    root: Path,
) -> tuple[list[tuple[PoolFile, LocalFile | LoadedDataset]], dict[str, str]]:
    """The source's files that can be had (verified), and `display name -> reason` for those that cannot.

    A user file that cannot be read is an InputError (the user declared it); a public file is merely missing.
    A file whose bytes do not match the pinned sha256 is a ChecksumError either way.
    """
    found: list[tuple[PoolFile, LocalFile | LoadedDataset]] = []
    missing: dict[str, str] = {}
    for file in source.files:
        if source.kind == "user" and file.dataset is not None:
            try:
                found.append(
                    (file, load_dataset_rows(file.dataset, root=root, allow_download=allow_download))
                )
            except Unavailable as reason:  # the user declared it: not a source to build the pool without
                why = str(reason).removeprefix(f"{file.display_name}: ")
                raise InputError(file.display_name, f"cannot load the user dataset: {why}") from None
            continue
        if source.kind == "user":
            found.append((file, _user_file(file, root)))
            continue
        try:
            found.append((file, _public_file(file, mirror_dir, allow_download, timeout_s, work_dir)))
        except Unavailable as reason:
            missing[file.display_name] = str(reason)
    return found, missing


def _public_file(
    file: PoolFile, mirror_dir: Path, allow_download: bool, timeout_s: float, work_dir: Path
) -> LocalFile:
    try:
        return from_mirror(file, mirror_dir)  # type: ignore[arg-type]  # PoolFile has FileSpec's fields
    except Unavailable as mirror_reason:
        if not allow_download:
            raise Unavailable(f"{mirror_reason}; downloads are disabled") from None
        if file.url is None and file.hf is None:
            raise Unavailable(f"{mirror_reason}; no pinned download URL") from None
        try:
            return download(file, work_dir, timeout_s)  # type: ignore[arg-type]
        except Unavailable as download_reason:
            raise Unavailable(f"{mirror_reason}; {download_reason}") from None


def _user_file(file: PoolFile, root: Path) -> LocalFile:
    assert file.path is not None  # checked by PoolSource
    path = Path(file.path) if Path(file.path).is_absolute() else root / file.path
    if not path.is_file():
        raise InputError(file.path, f"cannot read the user pool file: no such file ({path})")
    actual = sha256_file(path)
    if file.sha256 is not None and actual != file.sha256:
        raise ChecksumError(file.path, f"sha256 mismatch: registry pins {file.sha256}, file has {actual}")
    return LocalFile(path=path, origin=file.path, sha256=actual, size=path.stat().st_size, verified=False)


# -------------------------------------------------------------------------------------------------- reading


def read_file_records(file: PoolFile, path: Path, display: str) -> tuple[list[str], Records]:
    """Records of a file; JSON may hold them under `records` or as `nested` {level: {level: [leaf]}}."""
    if file.format != "json":
        try:
            return read_records(path, file.format, display)
        except OSError as exc:
            raise InputError(display, f"cannot read the file: {exc}") from exc
    document = read_json_document(path, display)
    if file.nested:
        return _flatten_nested(document, file.nested, display)
    if file.records:
        document = resolve(document, file.records)
        if document is _MISSING:
            raise InputError(display, f"no {file.records!r} in the JSON document", field=file.records)
    if not isinstance(document, list):
        raise InputError(display, f"expected a JSON list of records, got {type(document).__name__}")
    # A list of plain strings (e.g. DangerousQA) reads as records with one `text` column.
    items = [{"text": item} if isinstance(item, str) else item for item in document]
    return records_from_objects(items, display)


def _flatten_nested(document: Any, levels: tuple[str, ...], display: str) -> tuple[list[str], Records]:
    records: Records = []

    def walk(node: Any, keys: tuple[str, ...]) -> None:
        if len(keys) == len(levels):
            if not isinstance(node, list):
                raise InputError(display, f"expected a list of strings under {'/'.join(keys)}")
            for leaf in node:
                record = dict(zip(levels, keys, strict=True))
                record["text"] = leaf
                records.append((len(records) + 1, record))
            return
        if not isinstance(node, dict):
            raise InputError(display, f"expected a mapping at level {levels[len(keys)]!r} under {keys}")
        for key, child in node.items():
            walk(child, (*keys, str(key)))

    walk(document, ())
    return [*levels, "text"], records


# -------------------------------------------------------------------------------------------------- mapping


def resolve(record: Any, path: str) -> Any:
    """A record's value at a column name or dotted path (`turns.0.content`); `_MISSING` when absent."""
    if isinstance(record, dict) and path in record:
        return record[path]
    node = record
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def as_text(value: Any) -> str:
    """A cell as text for templates and comparisons (missing/null -> "", booleans -> "true"/"false")."""
    if value is _MISSING or value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _fill(template: str, record: dict[str, Any]) -> str:
    return _FIELD.sub(lambda m: as_text(resolve(record, m.group(1))), template)


def _matches(record: dict[str, Any], conditions: dict[str, tuple[str, ...]]) -> Iterable[bool]:
    return (as_text(resolve(record, column)) in values for column, values in conditions.items())


def _prompt_fields(source: PoolSource) -> tuple[str, ...]:
    assert source.prompt is not None
    return template_fields(source.prompt) or (source.prompt,)


def _check_header(source: PoolSource, columns: list[str], display: str) -> None:
    """Flat formats (CSV, lines, parquet) must have the prompt, id and label columns in their header."""
    needed = {"prompt": list(_prompt_fields(source))}
    if source.id is not None:
        needed["id"] = list(template_fields(source.id) or (source.id,))
    needed["labels"] = list(source.labels.values())
    for role, names in needed.items():
        for name in names:
            if name.split(".")[0] not in columns and name not in columns:
                raise InputError(
                    display,
                    f"the {role} column {name!r} is not in the file; its columns are {columns}",
                    row="header",
                    field=name,
                )


def candidates_from_records(
    source: PoolSource,
    file: PoolFile,
    columns: list[str],
    records: Records,
    display: str,
    *,
    multi_file: bool,
) -> tuple[list[Candidate], LoadCounts]:
    """Map one file's records to candidates (pure). Row numbers in errors are the reader's 1-based rows."""
    assert source.prompt is not None
    if file.format in ("csv", "lines", "parquet") or source.kind == "user":
        _check_header(source, columns, display)
    strict = source.kind == "user"
    pattern = re.compile(source.prompt_pattern, re.S) if source.prompt_pattern else None
    counts = LoadCounts(rows_read=len(records))
    out: list[Candidate] = []
    seen_ids: dict[str, int] = {}
    prompt_is_template = bool(template_fields(source.prompt))
    for row, record in records:
        if not all(_matches(record, source.filter)) or any(_matches(record, source.exclude)):
            counts.filtered_out += 1
            continue
        if prompt_is_template:
            raw = _fill(source.prompt, record)
        else:
            value = resolve(record, source.prompt)
            if value is _MISSING:
                raise InputError(display, "the prompt field is missing", row=row, field=source.prompt)
            if value is not None and not isinstance(value, str):
                raise InputError(
                    display, f"the prompt is not text ({type(value).__name__})", row=row, field=source.prompt
                )
            raw = value or ""
        if source.prompt_suffix and all(
            as_text(resolve(record, name)).strip() for name in template_fields(source.prompt_suffix)
        ):
            raw += _fill(source.prompt_suffix, record)
        if pattern is not None:
            match = pattern.fullmatch(raw)
            if match is None:
                raise InputError(
                    display,
                    f"the prompt does not match prompt_pattern {source.prompt_pattern!r}",
                    row=row,
                    field=source.prompt,
                )
            raw = match.group(1)
        prompt, _ = stripped(raw, None)
        if not prompt:
            if strict:
                raise InputError(
                    display, "the prompt is empty or whitespace only", row=row, field=source.prompt
                )
            counts.empty_prompt += 1
            continue
        if source.min_words and len(prompt.split()) < source.min_words:
            counts.filtered_out += 1
            continue
        native_id = None
        if source.id is not None:
            native_id = (
                _fill(source.id, record)
                if template_fields(source.id)
                else as_text(resolve(record, source.id))
            ).strip()
            if strict:
                if not native_id:
                    raise InputError(display, "the id is empty", row=row, field=source.id)
                if native_id in seen_ids:
                    raise InputError(
                        display,
                        f"duplicate id {native_id!r} (first seen in row {seen_ids[native_id]})",
                        row=row,
                        field=source.id,
                    )
                seen_ids[native_id] = row
        facts = facts_for_record(source, record)
        if facts is None:
            counts.no_matching_fact_rule += 1
            continue
        pillars = pillars_for_record(source, file, record, display, row)
        if native_id:
            origin = f"{source.name}:{native_id}"
        elif multi_file:
            origin = f"{source.name}:{Path(file.display_name).name}:{row}"
        else:
            origin = f"{source.name}:{row}"
        imports = {
            f"{IMPORT_PREFIX}{name}": (as_text(resolve(record, column)) or None)
            for name, column in source.labels.items()
        }
        out.append(
            Candidate(
                source=source.name,
                kind=source.kind,
                origin=origin,
                prompt=prompt,
                facts=facts,
                pillars=pillars,
                imports=imports,
            )
        )
    counts.candidates = len(out)
    return out, counts


def facts_for_record(source: PoolSource, record: dict[str, Any]) -> tuple[str, ...] | None:
    if not source.fact_rules:
        return tuple(sorted(set(source.facts)))
    for rule in source.fact_rules:
        if all(_matches(record, rule.when)) and (not rule.when_any or any(_matches(record, rule.when_any))):
            return tuple(sorted(set(rule.facts)))
    return None


def pillars_for_record(
    source: PoolSource, file: PoolFile, record: dict[str, Any], display: str, row: int
) -> tuple[str, ...]:
    pillars = {*source.pillars, *file.pillars}
    for pillar_map in source.pillars_from:
        value = as_text(resolve(record, pillar_map.column))
        if value in pillar_map.map:
            pillars.update(pillar_map.map[value])
        elif pillar_map.default is not None:
            pillars.update(pillar_map.default)
        else:
            raise InputError(
                display,
                f"value {value!r} has no entry in pillars_from (and no default); add it to the registry",
                row=row,
                field=pillar_map.column,
            )
    return tuple(sorted(pillars))


def load_source(
    source: PoolSource, files: list[tuple[PoolFile, LocalFile | LoadedDataset]]
) -> tuple[list[Candidate], LoadCounts]:
    """Read and map every acquired file of a public or user source."""
    candidates: list[Candidate] = []
    counts = LoadCounts()
    multi_file = len(source.files) > 1
    for file, local in files:
        display = local.origin.removeprefix("mirror:")
        if isinstance(local, LoadedDataset):
            columns, records = local.columns, local.records
        else:
            columns, records = read_file_records(file, local.path, display)
        rows, file_counts = candidates_from_records(
            source, file, columns, records, display, multi_file=multi_file
        )
        candidates.extend(rows)
        counts.add(file_counts)
    return candidates, counts
