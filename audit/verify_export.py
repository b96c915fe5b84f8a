"""`python -m audit.verify_export FILE [--partial]`: check an exported audit trail away from the
platform. Standard library only: run it with any Python 3.9+, without the platform's code or
database.

FILE is a CSV or JSON Lines export (`.csv` / `.jsonl`, or by its first character) made by the
audit page or `GET /api/v1/audit-events/?format=csv|jsonl`. For each row, in file order, it
re-derives (docs/audit.md "Checking an export"):

    body     = canonical JSON of the hashed columns (keys sorted, no spaces, UTF-8, non-ASCII kept,
               null and "" left out)
    row_hash = SHA-256(prev_hash + ":" + chain_seq + ":" + SHA-256(body))

and checks that each row's prev_hash is the row_hash of the row before it, that chain_seq counts
up by one (without --partial; a filtered export has gaps, which --partial accepts and counts) and
that the first row of a trail (chain_seq 1) links to nothing. Exit 0 and print the row count and the
head hash (the last row's row_hash) when every row fits; exit 1 naming the first row (line, chain_seq,
id) that does not; exit 2 when the file cannot be read.

An archive file of the retention run (docs/operations.md, "Retention and storage") has a manifest
beside it, FILE.manifest.json (or given with --manifest): the file's SHA-256, row count, first and
last chain_seq, the hash its first row links to (prev_hash) and its last row's hash. With a
manifest the file must hash to the manifest's SHA-256 (an edit made after archiving fails here even
if the rows were re-hashed), its first row must be the manifest's first_seq linking to its
prev_hash (so a cut that starts mid-trail verifies without --partial), and the count, last
chain_seq and last hash must be the manifest's.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import sys
from typing import Any, Iterator

# The columns the row hash covers, by the name they have in the export (the model's attribute names).
HASHED = ("id", "occurred_at", "tenant_id", "actor_id", "request_id", "conversation_id", "run_id", "tool_call_id",
          "tool_name", "tool_owner", "tool_version", "decision", "policy_decision", "status", "arguments_hash",
          "masked_arguments", "confirmation_id", "idempotency_key", "business_result_id", "duration_ms", "message",
          "execution", "policy_version", "policy_rules", "channel")
INTEGER = ("tenant_id", "actor_id", "policy_version", "chain_seq")
NUMBER = ("duration_ms",)
JSON = ("masked_arguments", "execution", "policy_rules", "channel")
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "'")


class Unfit(Exception):
    """A row that does not fit the chain (or a file that cannot be read as an export)."""


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _plain(value: Any) -> Any:
    """Integral floats as integers, as the platform hashes them (jsonb returns 1e16 as an integer)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def canonical_body(row: dict[str, Any]) -> str:
    """The canonical JSON text of one exported row (its HASHED columns)."""
    body = {k: _plain(row[k]) for k in HASHED if row.get(k) is not None and row.get(k) != ""}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _csv_value(name: str, text: str) -> Any:
    """One CSV cell back to its value: the export's leading quote taken off, then typed."""
    if text.startswith("'") and text[1:].startswith(FORMULA_PREFIXES):
        text = text[1:]
    if text == "":
        return None
    if name in JSON:
        return json.loads(text)
    if name in INTEGER:
        return int(text)
    if name in NUMBER:
        number = float(text)
        return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number
    if name == "redacted":
        return text == "true"
    return text


def read_rows(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) for each row of the file, CSV or JSON Lines. Raises Unfit when the file
    is neither or lacks the chain columns."""
    with open(path, encoding="utf-8", newline="") as handle:
        head = handle.read(1)
        handle.seek(0)
        if path.endswith(".jsonl") or path.endswith(".ndjson") or (not path.endswith(".csv") and head == "{"):
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as error:
                    raise Unfit(f"line {number} is not JSON ({error.msg})") from error
            return
        reader = csv.DictReader(handle)
        missing = {"chain_seq", "prev_hash", "row_hash", *HASHED} - set(reader.fieldnames or ())
        if missing:
            raise Unfit(f"the file lacks the chain columns {', '.join(sorted(missing))}")
        for row in reader:
            try:
                yield reader.line_num, {name: _csv_value(name, text or "") for name, text in row.items()}
            except (ValueError, json.JSONDecodeError) as error:
                raise Unfit(f"line {reader.line_num} has a value that does not parse ({error})") from error


def file_sha256(path: str) -> str:
    """Hex SHA-256 of the bytes of the file at `path`. Raises OSError."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(path: str, manifest_path: str) -> dict[str, Any]:
    """The manifest of the archive file at `path`, after checking the file's SHA-256 against it.

    Raises Unfit when the manifest is not a JSON object with sha256, first_seq and prev_hash, or
    when the file's bytes do not hash to its sha256 (the file changed after it was archived);
    OSError when either cannot be read.
    """
    with open(manifest_path, encoding="utf-8") as handle:
        try:
            manifest = json.load(handle)
        except json.JSONDecodeError as error:
            raise Unfit(f"the manifest {manifest_path} is not JSON ({error.msg})") from error
    if not isinstance(manifest, dict) or not {"sha256", "first_seq", "prev_hash"} <= set(manifest):
        raise Unfit(f"the manifest {manifest_path} lacks sha256, first_seq or prev_hash")
    actual = file_sha256(path)
    if actual != manifest["sha256"]:
        raise Unfit(f"the file's SHA-256 {actual} is not its manifest's {manifest['sha256']}: "
                    "the file was changed after it was archived")
    return manifest


def check_against_manifest(manifest: dict[str, Any], count: int, head: str, last_seq: int) -> None:
    """Raise Unfit when the verified file's row count, last chain_seq or head hash is not the manifest's."""
    for name, actual in (("rows", count), ("last_seq", last_seq), ("last_hash", head)):
        if name in manifest and manifest[name] != actual:
            raise Unfit(f"the file has {name} {actual} but its manifest says {manifest[name]}")


def verify(path: str, *, partial: bool = False, start: tuple[int, str] | None = None) -> tuple[int, str, int, int]:
    """Check every row of the export at `path`; return (rows, head hash, gaps, redacted rows).

    start: (chain_seq, prev_hash) the first row must have (an archive that continues a trail, from
    its manifest); None: the first row is chain_seq 1 (or anything with `partial`).

    Raises Unfit naming the first row that does not fit: its content does not give its row_hash,
    its prev_hash is not the previous row's row_hash, its chain_seq does not follow (without
    `partial`), or it has no chain position.
    """
    count = gaps = redacted = 0
    previous: dict[str, Any] | None = None
    for line, row in read_rows(path):
        seq = row.get("chain_seq")
        name = f"line {line} (chain_seq={seq}, id={row.get('id')})"
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise Unfit(f"{name} has no chain position: it was inserted around the chain")
        prev_hash = row.get("prev_hash") or ""
        if row.get("redacted"):
            body = row.get("body_sha256") or ""  # shown otherwise than stored: only its digest is checkable
            redacted += 1
        else:
            body = _sha256(canonical_body(row))
            if row.get("body_sha256") and row["body_sha256"] != body:
                raise Unfit(f"{name} does not match its hash: the row was edited")
        if _sha256(f"{prev_hash}:{seq}:{body}") != row.get("row_hash"):
            raise Unfit(f"{name} does not match its hash: the row was edited")
        if seq == 1 and prev_hash:
            raise Unfit(f"{name} is the first of its trail but links to a predecessor")
        if previous is not None:
            if seq <= previous["chain_seq"]:
                raise Unfit(f"{name} repeats or goes back from chain_seq={previous['chain_seq']}: reordered or inserted")
            if seq == previous["chain_seq"] + 1:
                if prev_hash != previous["row_hash"]:
                    raise Unfit(f"{name} does not link to the row before it: rows replaced or inserted")
            elif partial:
                gaps += 1
            else:
                raise Unfit(f"rows chain_seq={previous['chain_seq'] + 1}..{seq - 1} are missing before {name}: "
                            "deleted (or the export was filtered: use --partial)")
        elif start is not None:
            if (seq, prev_hash) != (start[0], start[1]):
                raise Unfit(f"{name} is not the manifest's first row (chain_seq={start[0]} linking to "
                            f"{start[1] or 'nothing'}): rows missing or replaced at the start")
        elif seq != 1 and not partial:
            raise Unfit(f"{name} is not the first row of the trail (chain_seq 1): the file starts late "
                        "(or the export was filtered: use --partial)")
        previous = row
        count += 1
    if previous is None:
        raise Unfit("the file has no rows")
    return count, previous["row_hash"], gaps, redacted


def verify_archive(path: str, manifest_path: str) -> tuple[int, str]:
    """Check an archive file against its manifest and every row's link; return (rows, head hash).
    Raises Unfit (see read_manifest, verify, check_against_manifest) or OSError."""
    manifest = read_manifest(path, manifest_path)
    count, head, _gaps, _redacted = verify(path, start=(int(manifest["first_seq"]), manifest["prev_hash"] or ""))
    last_seq = int(manifest["first_seq"]) + count - 1
    check_against_manifest(manifest, count, head, last_seq)
    return count, head


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status (0 fits, 1 a row does not fit, 2 unreadable)."""
    parser = argparse.ArgumentParser(prog="python -m audit.verify_export", description=(
        "Check an exported audit trail (CSV or JSON Lines) offline: every row's hash and every link."))
    parser.add_argument("file", help="the exported .csv or .jsonl file")
    parser.add_argument("--partial", action="store_true",
                        help="accept gaps in chain_seq (an export of a filtered trail); each row and each "
                             "consecutive link is still checked")
    parser.add_argument("--manifest", help="the archive's manifest (default: FILE.manifest.json when it exists)")
    args = parser.parse_args(argv)
    manifest_path = args.manifest or (args.file + ".manifest.json")
    try:
        if args.manifest or os.path.exists(manifest_path):
            count, head = verify_archive(args.file, manifest_path)
            print(f"OK: {count} rows, head {head} (archive: SHA-256 and manifest match)")
            return 0
        count, head, gaps, redacted = verify(args.file, partial=args.partial)
    except OSError as error:
        print(f"cannot read {args.file}: {error.strerror or error}", file=sys.stderr)
        return 2
    except UnicodeDecodeError:
        print(f"cannot read {args.file}: not UTF-8 text", file=sys.stderr)
        return 2
    except Unfit as error:
        print(f"BROKEN: {error}")
        return 1
    notes = []
    if gaps:
        notes.append(f"{gaps} gap(s) between rows of a filtered export, not checked")
    if redacted:
        notes.append(f"{redacted} row(s) redacted on export, checked through body_sha256 only")
    print(f"OK: {count} rows, head {head}" + (f" ({'; '.join(notes)})" if notes else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
