"""Decode a prediction request body into a SlotBatch, or say precisely what is wrong.

Two encodings, one parser: ElasticCTR lines go straight to `elasticctr.data.parser`;
JSON samples ({"slots": {slot: [feasign, ...]}}) are checked for shape and types, then
written as ElasticCTR lines and parsed by the same parser, so ranges, SPARSE_DIM and slot
handling cannot differ between the two. Every problem raises `RequestError` (a 4xx).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from elasticctr.data.parser import FileStats, LineParser, SlotBatch

CT_LINES = "text/plain"
CT_JSON = "application/json"


class RequestError(Exception):
    """A client error: HTTP status, a stable code and a message naming the fault."""

    def __init__(self, status: int, code: str, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.problems = problems or []

    def body(self) -> dict:
        err = {"code": self.code, "message": self.message}
        if self.problems:
            err["problems"] = self.problems
        return {"error": err}


@dataclass
class Limits:
    max_samples: int = 1000  # per request
    max_body_bytes: int = 4 << 20
    max_features: int = 1000  # feasigns per sample (all slots)


@dataclass
class Decoded:
    batch: SlotBatch
    labels: np.ndarray | None  # click per sample (lines carry it; JSON may)


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def decode(body: bytes, content_type: str | None, parser: LineParser, limits: Limits) -> Decoded:
    media = _media_type(content_type)
    if len(body) > limits.max_body_bytes:
        raise RequestError(
            413, "too_large", f"request body has {len(body)} bytes, limit {limits.max_body_bytes}"
        )
    if media == CT_JSON:
        data = _json_to_lines(body, parser, limits)
        source = "sample"
    elif media == CT_LINES:
        data = body
        source = "line"
    else:
        raise RequestError(
            415,
            "unsupported_media_type",
            f"Content-Type {content_type or '(none)'!r} is not accepted: send {CT_LINES} "
            f'(ElasticCTR lines) or {CT_JSON} ({{"samples": [{{"slots": {{...}}}}]}})',
        )
    return _parse(data, parser, limits, source)


def prepare(
    body: bytes, content_type: str | None, parser: LineParser, limits: Limits
) -> tuple[bytes, int]:
    """Cheap checks before queueing: (ElasticCTR lines ending in a newline, number of samples).

    The parse itself happens once per batch (`parse_checked`); a request whose lines turn
    out malformed is then parsed alone by `decode` to give its own precise error.
    """
    media = _media_type(content_type)
    if len(body) > limits.max_body_bytes:
        raise RequestError(
            413, "too_large", f"request body has {len(body)} bytes, limit {limits.max_body_bytes}"
        )
    if media == CT_JSON:
        data = _json_to_lines(body, parser, limits)
    elif media == CT_LINES:
        data = body if body.endswith(b"\n") else body + b"\n"
    else:
        decode(body, content_type, parser, limits)  # raises the 415
        raise AssertionError("unreachable")
    n = sum(1 for line in data.split(b"\n") if line.strip(b" \t\r"))
    if n == 0:
        raise RequestError(400, "empty", "the request has no samples")
    if n > limits.max_samples:
        raise RequestError(
            413, "too_many_samples", f"{n} samples in one request, limit {limits.max_samples}"
        )
    return data, n


def parse_checked(data: bytes, parser: LineParser, limits: Limits, expect: int) -> SlotBatch | None:
    """Parse a batch of requests' lines; None if any line needs a per-request error."""
    stats = FileStats(source="line")
    batch = parser.parse(data, stats)
    if stats.malformed or stats.ignored_slots or len(batch) != expect:
        return None
    # (np.array, not np.stack: the same [nslots, n] at a third of the cost)
    if batch.lengths and int(np.array(batch.lengths).sum(axis=0).max()) > limits.max_features:
        return None
    return batch


def _parse(data: bytes, parser: LineParser, limits: Limits, source: str) -> Decoded:
    if not data.strip():
        raise RequestError(400, "empty", "the request has no samples")
    stats = FileStats(source=source)
    batch = parser.parse(data, stats)
    if stats.malformed:
        raise RequestError(
            400,
            "malformed",
            f"{stats.malformed} malformed {source}(s); the first: {stats.examples[0]}",
            problems=stats.examples,
        )
    if stats.ignored_slots:
        unknown = sorted(stats.ignored_slots)
        raise RequestError(
            400,
            "unknown_slot",
            f"unknown slot(s) {unknown[:10]}: this model's slots are {_slot_list(parser.slots)}",
        )
    n = len(batch)
    if n == 0:
        raise RequestError(400, "empty", "the request has no samples")
    if n > limits.max_samples:
        raise RequestError(
            413, "too_many_samples", f"{n} samples in one request, limit {limits.max_samples}"
        )
    per_sample = np.sum(np.stack(batch.lengths), axis=0) if batch.lengths else np.zeros(n)
    if per_sample.size and int(per_sample.max()) > limits.max_features:
        i = int(np.argmax(per_sample))
        raise RequestError(
            413,
            "too_many_features",
            f"{source} {i + 1} has {int(per_sample[i])} feasigns, limit {limits.max_features}",
        )
    return Decoded(batch, batch.click)


def _slot_list(slots: tuple[int, ...]) -> str:
    if list(slots) == list(range(slots[0], slots[0] + len(slots))):
        return f"{slots[0]}..{slots[-1]}"
    return str(list(slots))


def _json_to_lines(body: bytes, parser: LineParser, limits: Limits) -> bytes:
    try:
        doc = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise RequestError(400, "bad_json", f"the body is not UTF-8: {exc}") from exc
    except ValueError as exc:
        raise RequestError(400, "bad_json", f"the body is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise RequestError(400, "bad_json", 'expected a JSON object {"samples": [...]}')
    extra = set(doc) - {"samples"}
    if extra:
        raise RequestError(400, "bad_json", f"unknown field(s) {sorted(extra)}; only 'samples'")
    samples = doc.get("samples")
    if not isinstance(samples, list):
        raise RequestError(400, "bad_json", "'samples' must be a list of {\"slots\": {...}}")
    if not samples:
        raise RequestError(400, "empty", "the request has no samples")
    if len(samples) > limits.max_samples:
        raise RequestError(
            413,
            "too_many_samples",
            f"{len(samples)} samples in one request, limit {limits.max_samples}",
        )
    known = set(parser.slots)
    out = []
    for i, sample in enumerate(samples):
        where = f"samples[{i}]"
        if not isinstance(sample, dict) or not isinstance(sample.get("slots"), dict):
            raise RequestError(400, "bad_json", f'{where}: expected {{"slots": {{slot: [ids]}}}}')
        extra = set(sample) - {"slots", "click"}
        if extra:
            raise RequestError(400, "bad_json", f"{where}: unknown field(s) {sorted(extra)}")
        click = sample.get("click", 0)
        if click not in (0, 1) or isinstance(click, bool | float):
            raise RequestError(400, "bad_json", f"{where}.click must be 0 or 1")
        parts = [b"1", b"1" if click else b"0"]
        nfeat = 0
        for slot_key, ids in sample["slots"].items():
            if not (isinstance(slot_key, str) and slot_key.isdigit() and slot_key.isascii()):
                raise RequestError(
                    400, "bad_json", f"{where}: slot {slot_key!r} is not a non-negative integer"
                )
            slot = int(slot_key)
            if slot not in known:
                raise RequestError(
                    400,
                    "unknown_slot",
                    f"{where}: unknown slot {slot}: this model's slots are "
                    f"{_slot_list(parser.slots)}",
                )
            if not isinstance(ids, list):
                raise RequestError(400, "bad_json", f"{where}.slots.{slot_key}: expected a list")
            nfeat += len(ids)
            if nfeat > limits.max_features:
                raise RequestError(
                    413,
                    "too_many_features",
                    f"{where} has more than {limits.max_features} feasigns",
                )
            for fid in ids:
                if isinstance(fid, int) and not isinstance(fid, bool) and 0 <= fid < 2**64:
                    parts.append(b"%d:%d" % (fid, slot))
                elif isinstance(fid, str) and fid.isascii() and fid.isdigit() and len(fid) <= 20:
                    if int(fid) >= 2**64:
                        raise RequestError(
                            400, "bad_feasign", f"{where}.slots.{slot_key}: {fid} >= 2^64"
                        )
                    parts.append(b"%s:%d" % (fid.encode(), slot))
                else:
                    raise RequestError(
                        400,
                        "bad_feasign",
                        f"{where}.slots.{slot_key}: feasign {fid!r} is not an integer in "
                        "[0, 2^64) (or its decimal string)",
                    )
        out.append(b" ".join(parts))
    return b"\n".join(out) + b"\n"
