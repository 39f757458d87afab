"""Service ports have one home in the chart (issue 27): the common library's
`elasticctr.port`, whose numbers are elasticctr.constants'. No other template spells one
out, so a port changed in constants.py and in the library changes everywhere."""

from __future__ import annotations

import re

import pytest
import yaml
from chart_helpers import CHART, render

from elasticctr import constants as C

pytestmark = pytest.mark.chart

LIBRARY = CHART / "charts" / "common"
PORTS = {
    "fileserver": C.FILESERVER_PORT,
    "mlflow": C.MLFLOW_PORT,
    "cube": C.CUBE_PORT,
    "cubeTransfer": C.CUBE_TRANSFER_PORT,
    "serving": C.SERVING_PORT,
    "console": C.CONSOLE_PORT,
}


def _literal(port: int) -> re.Pattern:
    return re.compile(rf"(?<![\w.]){port}(?![\w])")


def _templates() -> list:
    """Every template file of the umbrella and its subcharts (NOTES.txt and the test hook
    too), the library's excepted."""
    return [
        f
        for f in sorted(CHART.rglob("*"))
        if f.is_file() and "templates" in f.relative_to(CHART).parts and LIBRARY not in f.parents
    ]


def test_the_librarys_ports_are_the_constants():
    text = (LIBRARY / "templates" / "_ports.tpl").read_text()
    match = re.search(r"\$ports := dict((?: \"\w+\" \d+)+) -\}\}", text)
    assert match, "_ports.tpl: no $ports dict"
    found = {name: int(port) for name, port in re.findall(r'"(\w+)" (\d+)', match.group(1))}
    assert found == PORTS


def test_no_template_outside_the_library_spells_a_port():
    templates = _templates()
    assert len(templates) > 40 and any(f.name == "NOTES.txt" for f in templates)
    found = [
        f"{f.relative_to(CHART)}:{n}: {port}"
        for f in templates
        for n, line in enumerate(f.read_text().splitlines(), start=1)
        for port in PORTS.values()
        if _literal(port).search(line)
    ]
    assert not found, 'use include "elasticctr.port" NAME instead:\n' + "\n".join(found)
    # The check has teeth: the library's own dict is what it would report.
    ports = (LIBRARY / "templates" / "_ports.tpl").read_text()
    assert all(_literal(port).search(ports) for port in PORTS.values())


def test_the_rendered_ports_are_the_constants(helm):
    rendered = render(helm)
    assert rendered.returncode == 0, rendered.stderr
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(rendered.stdout) if d}

    def container_port(kind: str, name: str) -> int:
        (container,) = docs[(kind, name)]["spec"]["template"]["spec"]["containers"]
        return container["ports"][0]["containerPort"]

    for part, kind in (
        ("fileserver", "Deployment"),
        ("mlflow", "Deployment"),
        ("cube", "StatefulSet"),
        ("serving", "Deployment"),
    ):
        assert container_port(kind, f"ctr-{part}") == PORTS[part], part
    assert container_port("Deployment", "ctr-cube-transfer") == C.CUBE_TRANSFER_PORT
    # serving's Service port is a value (serving.service.port); the others are fixed.
    for part, service in (
        ("fileserver", "ctr-fileserver"),
        ("mlflow", "ctr-mlflow"),
        ("cube", "ctr-cube-headless"),
    ):
        assert docs[("Service", service)]["spec"]["ports"][0]["port"] == PORTS[part]
    endpoints = docs[("ConfigMap", "ctr-cube-endpoints")]["data"]["shards"]
    from elasticctr.cube.protocol import parse_shards

    first = parse_shards(endpoints)[0][0]
    assert first == f"http://ctr-cube-0.ctr-cube-headless.ml.svc:{C.CUBE_PORT}"
