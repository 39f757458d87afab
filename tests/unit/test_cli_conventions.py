"""ectl follows helm's and kubectl's conventions where it mirrors them (issue 27).

`-f/--values` on every verb that reads values, helm's `--set` family read by one parser
(`elasticctr.cli._values`, a port of helm's strvals; tests/integration/test_ectl_release.py
compares it with the real helm), `-o table|json|yaml` on the read verbs, and Go-style
durations for `logs --since` and `--timeout`. Driven through the real entry point.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
import yaml

from elasticctr import values as chart_values
from elasticctr.cli._common import OutputFormat
from elasticctr.cli._values import Overrides, apply_overrides, parse_sets, typed_value
from elasticctr.cli.main import _register
from elasticctr.constants import repo_root
from elasticctr.errors import ValidationError

pytestmark = pytest.mark.fast

DEMO = repo_root() / "values" / "demo.yaml"


@pytest.fixture(scope="module", autouse=True)
def registered():
    _register()


def flat(text: str) -> str:
    return " ".join(text.split())


def problems_of(overrides: Overrides, base: dict | None = None) -> list[str]:
    with pytest.raises(ValidationError) as err:
        apply_overrides(base or {}, overrides)
    assert err.value.exit_code == 2
    return err.value.problems


# --- helm's --set, read the way helm reads it -----------------------------------------------


def test_commas_separate_pairs_as_in_helm():
    """The user's `--set 'cube.shards=4,serving.replicas=3'` is two values, both numbers."""
    assert parse_sets(["cube.shards=4,serving.replicas=3"]) == {
        "cube": {"shards": 4},
        "serving": {"replicas": 3},
    }
    assert parse_sets(["a=1,", "b.c=x,b.d=y"]) == {"a": 1, "b": {"c": "x", "d": "y"}}


def test_escapes_keep_commas_equals_and_dots_literal():
    assert parse_sets([r"a=one\,two,b=x\=y", r"c=p=q"]) == {"a": "one,two", "b": "x=y", "c": "p=q"}
    assert parse_sets([r"ann.example\.com/x=1"]) == {"ann": {"example.com/x": 1}}
    assert parse_sets([r"a={x\,y,z}"]) == {"a": ["x,y", "z"]}


def test_list_indices_and_list_literals():
    assert parse_sets(["a.b[0]=v"]) == {"a": {"b": ["v"]}}
    assert parse_sets(["a[1].c=v"]) == {"a": [None, {"c": "v"}]}
    assert parse_sets(["a[0].x=1,a[0].y=2"]) == {"a": [{"x": 1, "y": 2}]}
    assert parse_sets(["n[1][1]=1"]) == {"n": [None, [None, 1]]}
    assert parse_sets(["slots={0,1,2}", "names={a,b}"]) == {"slots": [0, 1, 2], "names": ["a", "b"]}
    assert parse_sets(["a={}"]) == {"a": [""]}  # helm's reading, too
    # into a list the files set: the other items stay (helm's ParseInto)
    assert apply_overrides({"l": ["x", "y", "z"]}, Overrides(set=("l[1]=Y",))) == {
        "l": ["x", "Y", "z"]
    }
    # into a map the files set: its other keys stay
    base = {"m": {"k": 1}}
    assert apply_overrides(base, Overrides(set=("m.j=2",))) == {"m": {"k": 1, "j": 2}}
    assert base == {"m": {"k": 1}}  # the caller's dict is not changed


@pytest.mark.parametrize(
    "text, value",
    [
        ("4", 4),
        ("0", 0),
        ("-5", -5),
        ("+5", 5),
        ("9223372036854775807", 9223372036854775807),
        ("9223372036854775808", "9223372036854775808"),  # beyond int64: helm keeps text
        ("007", "007"),  # leading zeros: a string (think file modes, zip codes)
        ("1.5", "1.5"),  # helm types no floats
        ("1e3", "1e3"),
        ("0x1F", "0x1F"),
        ("1_000", "1_000"),
        ("true", True),
        ("TRUE", True),
        ("False", False),
        ("null", None),
        ("NULL", None),
        ("yes", "yes"),  # not YAML 1.1: helm's --set knows only true/false
        ("", ""),
        ("[1]", "[1]"),
    ],
)
def test_set_types_values_as_helm_does(text, value):
    assert typed_value(text) == value
    assert type(typed_value(text)) is type(value)


def test_null_deletes_a_default_key():
    user = parse_sets(["cube.podDisruptionBudget=null"])
    assert user == {"cube": {"podDisruptionBudget": None}}
    assert "podDisruptionBudget" in chart_values.effective_values({})["cube"]
    assert "podDisruptionBudget" not in chart_values.effective_values(user)["cube"]


def test_set_string_keeps_strings_and_comes_after_set():
    """helm applies every --set, then every --set-string, whatever the command-line order."""
    assert apply_overrides({}, Overrides(set_string=("a=1,b=true,c=null,d={1,2}",))) == {
        "a": "1",
        "b": "true",
        "c": "null",
        "d": ["1", "2"],
    }
    assert apply_overrides({}, Overrides.of(sets=["x=2"], strings=["x=1"])) == {"x": "1"}
    assert apply_overrides({}, Overrides.of(sets=["x=2"], json_values=["x=1"])) == {"x": 2}


def test_set_file_reads_the_whole_file_as_a_string(tmp_path, monkeypatch):
    (tmp_path / "ca.pem").write_text("-----BEGIN-----\nabc, def\n")
    monkeypatch.chdir(tmp_path)  # relative paths are the current directory's, as in helm
    assert apply_overrides({}, Overrides(set_file=("tls.ca=ca.pem",))) == {
        "tls": {"ca": "-----BEGIN-----\nabc, def\n"}
    }
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9")
    [problem] = problems_of(Overrides(set_file=("x=latin1.txt",)))
    assert "--set-file x=latin1.txt: x: latin1.txt is not UTF-8 text" in problem


def test_set_literal_keeps_the_rest_of_the_item_as_one_string():
    """helm's --set-literal: one pair, the value everything after the first `=`, a string;
    commas belong to key names; no escapes. Applied after every other --set flag."""
    from elasticctr.cli._values import Overrides, apply_overrides

    got = apply_overrides(
        {},
        Overrides.of(
            sets=["a=1,b=2"],
            literals=[r"a=x,y=z\,{1}", "c.d[1]=007", "k,e=v", "t=true"],
        ),
    )
    assert got == {"a": r"x,y=z\,{1}", "b": 2, "c": {"d": [None, "007"]}, "k,e": "v", "t": "true"}


def test_set_json_types_numbers_lists_and_maps():
    assert apply_overrides(
        {}, Overrides(set_json=('a=0.5,b=[1,{"c":null}],d=,e="s"', 'f={"g":1}'))
    ) == {"a": 0.5, "b": [1, {"c": None}], "d": None, "e": "s", "f": {"g": 1}}


@pytest.mark.parametrize(
    "flag, item, words",
    [
        ("set", "nokey", 'key "nokey" has no value'),
        ("set", "a,b=1", 'key "a" has no value'),
        ("set", "a=1,,b=2", "empty key name"),
        ("set", "a[-1]=x", "a[-1]: negative index not allowed"),
        ("set", "a[x]=1", "a[x]: the index must be a whole number"),
        ("set", "a[1=x", "a[1=x: no closing ]"),
        ("set", "a={1,2", "a: a list must end with }"),
        ("set", "a[70000]=1", "index above the maximum of 65536"),
        ("set", "l.x=1", "l is a list in the values, not a map"),
        ("set", "m[0]=1", "m is a map in the values, not a list"),
        ("set", "s.t=1", "s is the value 'text' in the values, not a map"),
        ("set_json", "a=[1,", "a: not a JSON value"),
    ],
)
def test_bad_set_items_name_the_flag_the_item_and_the_fix(flag, item, words):
    base = {"l": [1], "m": {"k": 1}, "s": "text"}
    [problem] = problems_of(Overrides(**{flag: (item,)}), base)
    name = "--" + flag.replace("_", "-")
    assert problem.startswith(f"{name} {item}: "), problem
    assert words in problem, problem
    assert "(write key=" in problem  # the fix


def test_every_bad_item_is_listed_at_once_and_good_ones_still_apply():
    problems = problems_of(Overrides.of(sets=["nokey", "a=1", "b[x]=2"], files=["c=/no/such"]))
    assert [p.split(":")[0] for p in problems] == [
        "--set nokey",
        "--set b[x]=2",
        "--set-file c=/no/such",
    ]


# --- the verbs ----------------------------------------------------------------------------


def test_validate_takes_values_files_with_f_like_helm(tmp_path, ectl_here):
    proc = ectl_here("validate", "-f", str(DEMO))
    assert proc.returncode == 0, proc.stderr
    assert f"valid: {DEMO}" in proc.stdout
    fix = tmp_path / "fix.yaml"
    fix.write_text("trainer:\n  pserver:\n    replicas: 1\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  pserver:\n    replicas: 0\n")
    assert ectl_here("validate", "--values", str(bad)).returncode == 2
    assert ectl_here("validate", "-f", str(bad), "-f", str(fix)).returncode == 0  # later wins
    assert ectl_here("validate", "-f", str(fix), "-f", str(bad)).returncode == 2
    assert ectl_here("validate", str(bad), str(fix)).returncode == 0  # positional: as before


def test_validate_refuses_positional_files_mixed_with_f(tmp_path, ectl_here):
    proc = ectl_here("validate", str(DEMO), "-f", str(DEMO))
    assert proc.returncode == 2
    text = flat(proc.stderr)
    assert "either as arguments or with -f/--values, not both" in text
    assert "ectl validate -f base.yaml -f prod.yaml" in text
    assert "Traceback" not in proc.stderr


def test_validate_user_example_comma_separated_set(ectl_here):
    proc = ectl_here("validate", str(DEMO), "--set", "cube.shards=4,serving.replicas=3")
    assert proc.returncode == 0, proc.stderr
    assert "with 1 --set value(s)" in proc.stdout
    proc = ectl_here("validate", "-f", str(DEMO), "--set", "cube.shards=4,cube.shards=x")
    assert proc.returncode == 2
    assert "cube.shards: 'x' is not of type 'integer'" in proc.stderr


def test_validate_set_string_is_a_string_where_set_is_a_number(ectl_here):
    assert ectl_here("validate", "-f", str(DEMO), "--set", "cube.shards=4").returncode == 0
    proc = ectl_here("validate", "-f", str(DEMO), "--set-string", "cube.shards=4")
    assert proc.returncode == 2
    assert "cube.shards: '4' is not of type 'integer'" in proc.stderr
    proc = ectl_here("validate", "-f", str(DEMO), "--set-string", "global.image.tag=1")
    assert proc.returncode == 0, proc.stderr  # a tag that looks like a number stays text


def test_validate_set_of_a_decimal_says_to_use_set_json(ectl_here):
    proc = ectl_here(
        "validate", "-f", str(DEMO), "--set", "trainer.model.learningRate=0.01,cube.shards=04"
    )
    assert proc.returncode == 2
    text = flat(proc.stderr)
    assert (
        "trainer.model.learningRate: '0.01' is not of type 'number' (--set keeps 0.01 a "
        "string, as helm does: use --set-json trainer.model.learningRate=0.01" in text
    )
    assert "use --set-json cube.shards=4 or a values file" in text
    proc = ectl_here("validate", "-f", str(DEMO), "--set-json", "trainer.model.learningRate=0.01")
    assert proc.returncode == 0, proc.stderr


def test_validate_set_file_missing_file_is_one_clear_line(tmp_path, ectl_here):
    missing = tmp_path / "nope.txt"
    proc = ectl_here("validate", "-f", str(DEMO), "--set-file", f"global.data.hdfsUgi={missing}")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == "error: 1 bad --set value(s)"
    assert lines[1].strip() == (
        f"--set-file global.data.hdfsUgi={missing}: global.data.hdfsUgi: cannot read "
        f"{missing}: No such file or directory (give the path of a readable file, relative "
        "to the current directory)"
    )
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_validate_set_file_value_is_validated(tmp_path, ectl_here):
    ugi = tmp_path / "ugi"
    ugi.write_text("root,secret")
    assert (
        ectl_here("validate", "-f", str(DEMO), "--set-file", f"global.data.hdfsUgi={ugi}")
    ).returncode == 0
    tag = tmp_path / "tag"
    tag.write_text("4")
    proc = ectl_here("validate", "-f", str(DEMO), "--set-file", f"cube.shards={tag}")
    assert proc.returncode == 2  # a file's contents are a string, never a number
    assert "cube.shards: '4' is not of type 'integer'" in proc.stderr


def test_validate_without_files_checks_the_chart_defaults_and_sets(ectl_here):
    proc = ectl_here("validate", "--set", "cube.shards=2")
    assert proc.returncode == 0, proc.stderr
    assert "valid: chart defaults with 1 --set value(s)" in proc.stdout


def test_template_hands_helm_the_values_validated(monkeypatch, ectl_here, tmp_path):
    """ectl parses the --set family and hands helm the one validated dict: helm never
    re-reads the flags, so what ectl checked is what helm renders."""
    from elasticctr.cli import _common, release

    seen = {}

    async def fake_render(client, chart_path, name, values, namespace, upgrade):
        seen["values"] = values
        return [{"kind": "ConfigMap", "metadata": {"name": "x"}}]

    monkeypatch.setattr(_common, "helm_client", lambda target: object())
    monkeypatch.setattr(release, "render", fake_render)
    ugi = tmp_path / "ugi"
    ugi.write_text("u,p")
    proc = ectl_here(
        "template", "-f", str(DEMO), "--set", "cube.shards=3,global.data.slots={1,2}",
        "--set-string", "global.image.tag=7", "--set-file", f"global.data.hdfsUgi={ugi}",
        "--set-json", "trainer.model.learningRate=0.05", "-o", "json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    values = seen["values"]
    assert values["cube"]["shards"] == 3
    assert values["global"]["data"]["slots"] == [1, 2]
    assert values["global"]["image"]["tag"] == "7"
    assert values["global"]["data"]["hdfsUgi"] == "u,p"
    assert values["trainer"]["model"]["learningRate"] == 0.05
    assert values["global"]["data"]["startDateHour"]  # the file's values are there too


@pytest.mark.parametrize("verb", [["install"], ["upgrade"], ["template"], ["scenario", "add"]])
def test_deploy_verbs_take_the_whole_set_family(verb, ectl_here):
    proc = ectl_here(*verb, "--help")
    assert proc.returncode == 0
    text = flat(proc.stdout)
    for flag in ("--values", "-f", "--set ", "--set-string", "--set-file", "--set-json",
                 "--set-literal"):  # fmt: skip
        assert flag in text, (verb, flag)


# --- -o table|json|yaml -------------------------------------------------------------------

TRICKY = {
    "release": {"name": "ctr", "updated": dt.datetime(2026, 11, 30, 23, 0, tzinfo=dt.UTC)},
    "strings": [
        "2020-04-01",
        "20200401/00",
        "yes",
        "no",
        "on",
        "null",
        "~",
        "0777",
        "1e3",
        "12:30",
        "",
        " lead",
        "multi\nline\n",
        "naïve ✓",
        "a: b",
        "- x",
        "#c",
    ],  # fmt: skip
    "numbers": [0, -1, 2**63 - 1, 1.5, 1e-9, 0.0001],
    "flags": [True, False, None],
    "path": Path("/tmp/x"),
    "format": OutputFormat.json,
    "nested": {"list": [{"a": []}, {}], "empty": {}},
}


def _printed(output, data, capsys) -> str:
    from elasticctr.cli._common import print_data

    assert print_data(output, data) is True
    return capsys.readouterr().out


def test_yaml_output_loads_back_to_what_json_says(capsys):
    as_json = json.loads(_printed(OutputFormat.json, TRICKY, capsys))
    as_yaml = yaml.safe_load(_printed(OutputFormat.yaml, TRICKY, capsys))
    assert as_yaml == as_json
    assert as_yaml["strings"][0] == "2020-04-01" and as_yaml["strings"][2] == "yes"
    assert as_yaml["release"]["updated"] == "2026-11-30 23:00:00+00:00"
    from elasticctr.cli._common import print_data

    assert print_data(OutputFormat.table, TRICKY) is False
    assert capsys.readouterr().out == ""  # table: the verb draws it


def _commands(group, prefix=()):
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from _commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def test_every_verb_with_output_offers_table_json_and_yaml(ectl_here, monkeypatch):
    """Every verb's -o is the shared option (table|json|yaml); template prints manifests."""
    import inspect
    import typing

    import typer

    from elasticctr.cli._common import OUTPUT_OPTION
    from elasticctr.cli.main import app

    checked = []
    for name, command in _commands(typer.main.get_command(app)):
        has_o = any("--output" in getattr(p, "opts", ()) for p in command.params)
        if not has_o or name == ("template",):
            continue
        function = inspect.unwrap(command.callback)
        option = inspect.signature(function).parameters["output"]
        assert typing.get_type_hints(function)["output"] is OutputFormat, name
        assert option.default is OUTPUT_OPTION, name
        checked.append(" ".join(name))
    assert {"status", "history", "validate", "doctor", "install", "scenario list",
            "scenario status", "local status", "data profile"} <= set(checked)  # fmt: skip
    assert list(OutputFormat) == ["table", "json", "yaml"]
    monkeypatch.setenv("COLUMNS", "200")
    assert "<table|json|yaml>" in ectl_here("status", "--help").stdout
    assert "yaml (manifests) or json" in flat(ectl_here("template", "--help").stdout)


def test_validate_yaml_report_is_the_json_report(tmp_path, ectl_here):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  pserver:\n    replicas: 0\ncube:\n  shards: x\n")
    as_json = ectl_here("validate", "-f", str(bad), "-o", "json")
    as_yaml = ectl_here("validate", "-f", str(bad), "-o", "yaml")
    assert as_json.returncode == as_yaml.returncode == 2
    assert yaml.safe_load(as_yaml.stdout) == json.loads(as_json.stdout)
    assert yaml.safe_load(as_yaml.stdout)["valid"] is False


def test_status_and_scenario_list_print_yaml(monkeypatch, ectl_here):
    from elasticctr.cli import scenario, status

    sample = {"helm": {"name": "ctr", "revision": 3}, "pods": [], "model": {"newestVersion": None}}
    monkeypatch.setattr(status, "collect_status", lambda target: sample)
    rows = [{"name": "coupon", "served": "20200401/00", "heldout_auc": 0.75, "error": None}]
    monkeypatch.setattr(scenario, "collect", lambda target, platform, ns: rows)
    for args, expected in ((["status"], sample), (["scenario", "list"], rows),
                           (["scenario", "status"], rows)):  # fmt: skip
        proc = ectl_here(*args, "-n", "ctr", "-o", "yaml")
        assert proc.returncode == 0, (args, proc.stderr)
        assert yaml.safe_load(proc.stdout) == expected
    proc = ectl_here("status", "-n", "ctr", "-o", "xml")
    assert proc.returncode == 2 and "'xml' is not one of" in flat(proc.stderr), proc.stderr


# --- durations: logs --since and --timeout ------------------------------------------------


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("45s", 45),
        ("10m", 600),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("2h0m3s", 7203),
        ("300ms", 0.3),
        ("+5s", 5),
        ("600", 600),  # a bare number: seconds, as --since took before
        ("0", 0),
        (" 90 ", 90),
    ],
)
def test_durations_in_go_format(text, seconds):
    from elasticctr.cli._common import parse_duration

    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "m", "10x", "-5m", "1h-30m", "1 h", "10M", "1d", ".", "5s5"])
def test_bad_durations_are_refused(text):
    from elasticctr.cli._common import parse_duration

    with pytest.raises(ValueError):
        parse_duration(text)


class _FakeLogs:
    """CoreV1Api with one trainer pod; remembers what logs were asked for."""

    asked: list[dict] = []

    def __init__(self, api):
        pass

    def list_namespaced_pod(self, namespace, **kwargs):
        from kubernetes.client import V1ObjectMeta, V1Pod, V1PodList

        labels = {"app.kubernetes.io/instance": "elasticctr",
                  "app.kubernetes.io/component": "trainer"}  # fmt: skip
        return V1PodList(items=[V1Pod(metadata=V1ObjectMeta(name="t-0", labels=labels))])

    def read_namespaced_pod_log(self, name, namespace, **kwargs):
        _FakeLogs.asked.append(kwargs)

        class Response:
            data = b"line one\n"

        return Response()


@pytest.mark.parametrize(
    "since, seconds",
    [("10m", 600), ("1h30m", 5400), ("45s", 45), ("600", 600), ("1500ms", 2), ("0", None)],
)
def test_logs_since_takes_durations_like_kubectl(since, seconds, monkeypatch, ectl_here):
    import kubernetes.client

    from elasticctr.cli import _common

    class Api:
        def close(self):
            pass

    monkeypatch.setattr(_common, "kube_api_client", lambda target: Api())
    monkeypatch.setattr(kubernetes.client, "CoreV1Api", _FakeLogs)
    _FakeLogs.asked = []
    proc = ectl_here("logs", "trainer", "-n", "ctr", "--since", since)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "line one\n"
    [asked] = _FakeLogs.asked
    assert asked.get("since_seconds") == seconds


BAD_DURATION_VERBS = [
    ["logs", "trainer", "--since"],
    ["install", "--timeout"],
    ["upgrade", "--timeout"],
    ["uninstall", "--timeout"],
    ["rollback", "--timeout"],
    ["scenario", "add", "x", "--timeout"],
]


@pytest.mark.parametrize("verb", BAD_DURATION_VERBS)
def test_bad_durations_name_the_flag_and_the_fix(verb, ectl_here):
    proc = ectl_here(*verb, "ten minutes")
    assert proc.returncode == 2
    text = flat(proc.stderr)
    flag = verb[-1]
    assert f"Invalid value for '{flag}'" in text, text
    assert "'ten minutes' is not a duration; write e.g. 45s, 10m or 1h30m" in text
    assert "Traceback" not in proc.stderr


def test_timeout_reaches_helm_as_a_go_duration():
    from elasticctr.cli._common import go_duration

    assert go_duration("10m") == "10m"
    assert go_duration("1h30m") == "1h30m"
    assert go_duration("600") == "600s"  # helm itself refuses a bare number
