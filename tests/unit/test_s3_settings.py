"""How s3:// URLs are configured: one place (`storage.S3Settings`), read from the
environment names in elasticctr.constants. The store itself is tested for real against
SeaweedFS in tests/integration/test_s3_storage.py."""

from __future__ import annotations

import pytest

from elasticctr import constants as C
from elasticctr.data import storage
from elasticctr.errors import EctlError

pytestmark = pytest.mark.fast


def test_settings_come_from_the_standard_aws_names():
    env = {
        C.ENV_S3_ENDPOINT: "http://seaweedfs:8333/",
        C.ENV_S3_REGION: "cn-north-4",
        C.ENV_S3_PATH_STYLE: "true",
        C.ENV_S3_ACCESS_KEY_ID: "id",
        C.ENV_S3_SECRET_ACCESS_KEY: "secret",
    }
    settings = storage.S3Settings.from_env(env)
    assert settings.endpoint == "http://seaweedfs:8333" and settings.region == "cn-north-4"
    assert "secret" not in repr(settings)
    kwargs = settings.fs_kwargs()
    assert kwargs["endpoint_url"] == "http://seaweedfs:8333"
    assert kwargs["client_kwargs"] == {"region_name": "cn-north-4"}
    assert kwargs["key"] == "id" and kwargs["secret"] == "secret"
    assert kwargs["config_kwargs"]["s3"] == {"addressing_style": "path"}
    assert kwargs["use_listings_cache"] is False  # partitions are polled
    assert kwargs["default_block_size"] == storage.S3_BLOCK_BYTES


@pytest.mark.parametrize(
    "raw,style", [("", None), ("auto", None), ("false", "virtual"), ("1", "path"), ("TRUE", "path")]
)
def test_path_style(raw, style):
    kwargs = storage.S3Settings.from_env({C.ENV_S3_PATH_STYLE: raw}).fs_kwargs()
    assert kwargs["config_kwargs"].get("s3", {}).get("addressing_style") == style


def test_without_settings_the_sdk_chain_decides():
    kwargs = storage.S3Settings.from_env({}).fs_kwargs()
    assert not {"endpoint_url", "key", "secret", "client_kwargs"} & set(kwargs)
    assert storage.S3Settings.from_env({}).where.startswith("AWS S3")


def test_bad_settings_and_urls_are_clear_errors():
    with pytest.raises(EctlError, match=C.ENV_S3_PATH_STYLE):
        storage.S3Settings.from_env({C.ENV_S3_PATH_STYLE: "maybe"})
    with pytest.raises(EctlError, match="needs the bucket"):
        storage.url_to_fs("s3:///data")


def test_url_to_fs_gives_bucket_and_key(monkeypatch):
    monkeypatch.setenv(C.ENV_S3_ENDPOINT, "http://127.0.0.1:1")
    fs, path = storage.url_to_fs("s3://ctr/data/20200401/00/")
    assert type(fs).__name__ == "S3FileSystem" and path == "ctr/data/20200401/00"
    assert storage.url_to_fs("s3://ctr")[1] == "ctr"
    assert storage.is_s3("s3://ctr/x") and not storage.is_s3("/tmp/s3")


def test_values_global_s3_fills_the_environment_where_unset(monkeypatch):
    for name in (C.ENV_S3_ENDPOINT, C.ENV_S3_REGION, C.ENV_S3_PATH_STYLE):
        monkeypatch.setenv(name, "")  # recorded, so the test's own settings are undone
        monkeypatch.delenv(name)
    values = {"global": {"s3": {"endpoint": "http://sw:8333", "region": "", "pathStyle": True,
                                "existingSecret": "s3-cred"}}}  # fmt: skip
    assert storage.s3_env_from_values(values) == {
        C.ENV_S3_ENDPOINT: "http://sw:8333",
        C.ENV_S3_PATH_STYLE: "true",
    }
    monkeypatch.setenv(C.ENV_S3_PATH_STYLE, "false")  # the environment (a pod's) wins
    storage.apply_s3_values(values)
    assert storage.S3Settings.from_env().endpoint == "http://sw:8333"
    assert storage.S3Settings.from_env().path_style is False
    assert storage.s3_env_from_values({}) == {} == storage.s3_env_from_values({"global": None})
