"""The values a user passes to validate/install/upgrade/template, validated before helm sees them.

Reading, merging and validation belong to `elasticctr.values` (the chart's schemas and
cross-field rules, one source of truth with helm); this module owns the command line's
side: the `-f/--values` files and the `--set` family, read with helm's own rules (a port
of helm's `pkg/strvals`, applied in helm's order), and hands helm ONE merged dict
(pyhelm3 would concatenate lists if given several) holding only what the user set, so
changed chart defaults still apply on upgrade. Helm never parses the `--set` flags
itself: it gets the dict ectl validated, so what ectl checks is what helm installs.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from elasticctr.errors import ValidationError

# --- the options, shared by every verb that reads values --------------------------------

VALUES_OPTION = typer.Option(
    None,
    "--values",
    "-f",
    help="Values file (repeatable; later files override earlier ones, like helm -f).",
)
SET_OPTION = typer.Option(
    None,
    "--set",
    help="Values as helm --set reads them (repeatable): key=value pairs, comma-separated "
    "(a.b=1,c=x); a[0]=v and a[0].b=v set list items, {x,y} is a list, \\, a literal "
    "comma. true/false/null and whole numbers are typed (null deletes a default), "
    "everything else (1.5, 007) stays a string.",
)
SET_STRING_OPTION = typer.Option(
    None, "--set-string", help="Like --set, but every value is a string (repeatable)."
)
SET_FILE_OPTION = typer.Option(
    None,
    "--set-file",
    help="key=path: the file's contents as the value, a string (repeatable).",
)
SET_JSON_OPTION = typer.Option(
    None,
    "--set-json",
    help='key=JSON value pairs, comma-separated: a=0.01,b=[1,2],c={"x":1} (repeatable).',
)
SET_LITERAL_OPTION = typer.Option(
    None,
    "--set-literal",
    help="key=value, one pair: everything after the first = is the value, a string, "
    "commas and backslashes included (repeatable).",
)

SET_FIX = (
    "write key=value, pairs separated by commas: a.b=1,c=x; a list as {x,y}, a list item "
    "as a[0]=v, a comma inside a value as \\,"
)
SET_JSON_FIX = 'write key=JSON value, e.g. a.b=0.5 or a={"x":1}'


@dataclass(frozen=True)
class Overrides:
    """The --set family, applied over the values files in helm's order: every --set-json,
    then every --set, --set-string, --set-file and --set-literal, each in the order given."""

    set_json: tuple[str, ...] = ()
    set: tuple[str, ...] = ()
    set_string: tuple[str, ...] = ()
    set_file: tuple[str, ...] = ()
    set_literal: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        sets: list[str] | None = None,
        strings: list[str] | None = None,
        files: list[str] | None = None,
        json_values: list[str] | None = None,
        literals: list[str] | None = None,
    ) -> Overrides:
        return cls(tuple(json_values or ()), tuple(sets or ()), tuple(strings or ()),
                   tuple(files or ()), tuple(literals or ()))  # fmt: skip

    def flags(self) -> Iterator[tuple[str, str]]:
        """(flag, item) pairs in the order helm applies them."""
        for flag, items in (
            ("--set-json", self.set_json),
            ("--set", self.set),
            ("--set-string", self.set_string),
            ("--set-file", self.set_file),
            ("--set-literal", self.set_literal),
        ):
            for item in items:
                yield flag, item

    def __bool__(self) -> bool:
        return any((self.set_json, self.set, self.set_string, self.set_file, self.set_literal))


# --- helm's strvals ---------------------------------------------------------------------

MAX_INDEX = 65536
"""Helm refuses a list index above this (strvals.MaxIndex)."""
MAX_NESTING = 30
"""Helm refuses more nested names than this (strvals.MaxNestedNameLevel)."""
_INT = re.compile(r"[+-]?[0-9]+")
_INT64 = (-(2**63), 2**63 - 1)
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_JSON_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


class SetError(ValueError):
    """One --set item that helm would refuse too; `fix` says what to write instead."""

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        self.fix = fix


def typed_value(text: str) -> Any:
    """A --set value as helm types it: true/false/null in any case, and base-10 integers
    that fit 64 bits and do not start with 0 (but 0 itself); anything else stays the
    string it is: 1.5, 1e3, 007, 0x1F, 99999999999999999999."""
    low = text.lower()
    if low == "true":
        return True
    if low == "false":
        return False
    if low == "null":
        return None
    if text == "0":
        return 0
    if text and text[0] != "0" and _INT.fullmatch(text):
        number = int(text)
        if _INT64[0] <= number <= _INT64[1]:
            return number
    return text


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a map"
    if isinstance(value, list):
        return "a list"
    return "null" if value is None else f"the value {value!r}"


class _Parser:
    """helm's strvals parser over one item (`a.b=1,c[0]=x`), writing into `data` in place
    as helm's ParseInto does: maps and lists already there (from the files) are extended,
    never replaced by a new one."""

    def __init__(
        self,
        text: str,
        reader: Callable[[str], Any] | None,
        json_values: bool,
        literal: bool = False,
    ):
        self.text = text
        self.pos = 0
        self.reader = reader
        self.json_values = json_values
        self.literal = literal
        """--set-literal (helm's literal parser): keys end at = [ . only (a comma is part
        of a name), no backslash escapes, the value is the rest of the item."""
        self._decoder = json.JSONDecoder()

    def parse(self, data: dict[str, Any]) -> None:
        while self._key(data, 0, ""):
            pass

    def _next(self) -> str | None:
        if self.pos >= len(self.text):
            return None
        self.pos += 1
        return self.text[self.pos - 1]

    def _until(self, stop: str) -> tuple[str, str | None]:
        """The text up to one of `stop`, and that character (None at the end); a
        backslash takes the next character literally."""
        out: list[str] = []
        while True:
            ch = self._next()
            if ch is None:
                return "".join(out), None
            if ch in stop:
                return "".join(out), ch
            if ch == "\\" and not self.literal:
                ch = self._next()
                if ch is None:
                    return "".join(out), None
            out.append(ch)

    def _key(self, data: dict[str, Any], depth: int, path: str) -> bool:
        """One key and its value into `data`; False at the end of the text."""
        key, last = self._until("=[." if self.literal else "=[,.")
        if last is None:
            if not key:
                return False
            raise SetError(f'key "{path}{key}" has no value')
        if not key:
            raise SetError(f"empty key name after {path!r}" if path else "empty key name")
        where = f"{path}{key}"
        if last == ",":
            raise SetError(f'key "{where}" has no value')
        if last == "[":
            index = self._index(where)
            items = data.get(key, [])
            if not isinstance(items, list):
                raise SetError(f"{where} is {_kind(items)} in the values, not a list")
            items, more = self._item(items, index, depth, where)
            data[key] = items
            return more
        if last == "=":
            data[key] = self._value(where)
            return True
        depth += 1  # last == "."
        if depth > MAX_NESTING:
            raise SetError(f"{where}: more than {MAX_NESTING} nested names")
        inner = data.get(key, {})
        if not isinstance(inner, dict):
            raise SetError(f"{where} is {_kind(inner)} in the values, not a map")
        more = self._key(inner, depth, f"{where}.")
        if inner:
            data[key] = inner
        return more

    def _index(self, where: str) -> int:
        text, last = self._until("]")
        if last is None:
            raise SetError(f"{where}[{text}: no closing ]")
        if not _INT.fullmatch(text):
            raise SetError(f"{where}[{text}]: the index must be a whole number")
        index = int(text)
        if index < 0:
            raise SetError(f"{where}[{index}]: negative index not allowed")
        if index > MAX_INDEX:
            raise SetError(f"{where}[{index}]: index above the maximum of {MAX_INDEX}")
        return index

    def _item(self, items: list[Any], index: int, depth: int, where: str) -> tuple[list[Any], bool]:
        """The rest after `name[index]`: `=value`, `[i]...` or `.key...`."""
        here = f"{where}[{index}]"
        rest, last = self._until("[.=")
        if rest:
            raise SetError(f"{here}: unexpected {rest!r} after the index")
        if last is None:
            return items, False
        if last == "=":
            return _set_index(items, index, self._value(here)), True
        if last == "[":
            inner_index = self._index(here)
            inner = items[index] if index < len(items) and items[index] is not None else []
            if not isinstance(inner, list):
                raise SetError(f"{here} is {_kind(inner)} in the values, not a list")
            inner, more = self._item(inner, inner_index, depth, here)
            return (_set_index(items, index, inner), True) if more else (items, False)
        inner = items[index] if index < len(items) else None  # last == "."
        if not isinstance(inner, dict):
            inner = {}
            if index < len(items):
                items[index] = inner
        if not self._key(inner, depth, f"{here}."):
            return items, False
        return _set_index(items, index, inner), True

    def _value(self, where: str) -> Any:
        """What follows `=`: a JSON value (--set-json), a {x,y} list, or one value; with
        --set-literal the rest of the item, as it is."""
        if self.literal:
            rest, self.pos = self.text[self.pos :], len(self.text)
            return rest
        if self.json_values:
            if self._blank():
                return None
            try:
                value, self.pos = self._decoder.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                raise SetError(f"{where}: not a JSON value ({exc.msg})") from None
            self._blank()
            return value
        ch = self._next()
        if ch is None:
            return ""
        if ch == "{":
            return self._list(where)
        self.pos -= 1
        text, _ = self._until(",")
        return self._read(text, where)

    def _list(self, where: str) -> list[Any]:
        items = []
        while True:
            text, last = self._until(",}")
            if last is None:
                raise SetError(f"{where}: a list must end with }}")
            items.append(self._read(text, where))
            if last == "}":
                if self._next() not in (None, ","):
                    self.pos -= 1
                return items

    def _read(self, text: str, where: str) -> Any:
        if self.reader is None:
            return typed_value(text)
        try:
            return self.reader(text)
        except SetError as exc:
            raise SetError(f"{where}: {exc}", exc.fix) from None

    def _blank(self) -> bool:
        """Skip blanks; True (and the comma consumed) at a comma or the end."""
        while True:
            ch = self._next()
            if ch is None or ch == ",":
                return True
            if not ch.isspace():
                self.pos -= 1
                return False


def _set_index(items: list[Any], index: int, value: Any) -> list[Any]:
    if index >= len(items):
        items.extend([None] * (index + 1 - len(items)))
    items[index] = value
    return items


def _string(text: str) -> str:
    return text


def _file_contents(path: str) -> str:
    """helm's --set-file reader: the file's whole contents as a string."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise SetError(
            f"cannot read {path}: {exc.strerror or exc}",
            "give the path of a readable file, relative to the current directory",
        ) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SetError(f"{path} is not UTF-8 text", "values are text: save it as UTF-8") from None


def apply_set(values: dict[str, Any], flag: str, item: str) -> None:
    """One item of the --set family into `values`, in place."""
    readers: dict[str, Callable[[str], Any] | None] = {
        "--set": None, "--set-string": _string, "--set-file": _file_contents, "--set-json": None,
        "--set-literal": _string,
    }  # fmt: skip
    _Parser(
        item, readers[flag], json_values=flag == "--set-json", literal=flag == "--set-literal"
    ).parse(values)


def apply_overrides(values: dict[str, Any], overrides: Overrides) -> dict[str, Any]:
    """`values` (the merged files) with the --set family applied as helm applies it; every
    bad item is reported at once (ValidationError, exit 2)."""
    result = copy.deepcopy(values)
    problems = []
    for flag, item in overrides.flags():
        trial = copy.deepcopy(result)
        try:
            apply_set(trial, flag, item)
        except SetError as exc:
            fix = exc.fix or (SET_JSON_FIX if flag == "--set-json" else SET_FIX)
            problems.append(f"{flag} {item}: {exc} ({fix})")
            continue
        result = trial
    if problems:
        raise ValidationError(f"{len(problems)} bad --set value(s)", problems=problems)
    return result


def parse_sets(sets: list[str]) -> dict[str, Any]:
    """`--set` items as one values dict, as helm reads them (see `apply_overrides`)."""
    return apply_overrides({}, Overrides(set=tuple(sets)))


def _numeric_strings(overrides: Overrides) -> dict[str, str]:
    """Paths that --set made strings although they read as numbers (0.5, 007): helm
    types only whole numbers, so a schema that wants a number refuses them."""
    found: dict[str, str] = {}

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{path}.{key}" if path else str(key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]")
        elif isinstance(node, str) and _NUMBER.fullmatch(node):
            found[path] = node

    for item in overrides.set:
        scratch: dict[str, Any] = {}
        try:
            apply_set(scratch, "--set", item)
        except SetError:
            continue
        walk(scratch, "")
    return found


def _json_number(text: str) -> str:
    """007 -> 7, .5 -> 0.5, 1. -> 1.0: the JSON spelling of a number --set left a string."""
    if re.fullmatch(r"[+-]?[0-9]+", text):
        return str(int(text))
    return repr(float(text))


# --- the values a verb hands helm -------------------------------------------------------


def load_user_values(
    files: list[Path],
    chart: Path | None = None,
    sets: Overrides | list[str] | None = None,
    extra: dict[str, Any] | None = None,
    base: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Merge `base`, the files like `helm -f a -f b`, the --set family (helm's order), then
    `extra`; validate against the chart (so a file can override `base` but never `extra`)."""
    from elasticctr import values as chart_values

    overrides = sets if isinstance(sets, Overrides) else Overrides(set=tuple(sets or ()))
    merged = chart_values.merge(
        base or {}, chart_values.load_files([Path(f) for f in files]), drop_nulls=False
    )
    if overrides:
        merged = apply_overrides(merged, overrides)
    if extra:
        merged = chart_values.merge(merged, extra, drop_nulls=False)
    names = [*map(str, files), *(f"{flag} {item}" for flag, item in overrides.flags())]
    problems = chart_values.validate(merged, chart)
    numeric = _numeric_strings(overrides) if problems else {}
    for i, problem in enumerate(problems):
        path, _, message = problem.partition(": ")
        if path in numeric and "is not of type" in message:
            text = numeric[path]
            number = text if _JSON_NUMBER.fullmatch(text) else _json_number(text)
            problems[i] = (
                f"{problem} (--set keeps {text} a string, as helm does: use "
                f"--set-json {path}={number} or a values file)"
            )
    raise_problems(problems, names)
    return merged


def raise_problems(problems: list[str], files: list) -> None:
    if problems:
        names = ", ".join(str(f) for f in files) or "chart defaults"
        raise ValidationError(f"{names}: {len(problems)} problem(s)", problems=list(problems))
