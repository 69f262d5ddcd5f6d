"""onnx_service.config: the service's settings read from the environment, their defaults and their errors."""

from __future__ import annotations

import pytest

from onnx_service import config as svc_config


def test_settings_from_env_defaults_and_errors():
    settings = svc_config.Settings.from_env({})
    assert (settings.host, settings.port, settings.max_batch, settings.handler) == ("127.0.0.1", 8080, 64, "threadpool")
    assert svc_config.Settings.from_env({"ONNX_SERVICE_WORKERS": "2", "ONNX_SERVICE_ACCESS_LOG": "yes"}, port=9).workers == 2
    with pytest.raises(svc_config.ConfigError, match="ONNX_SERVICE_HANDLER='fast': expected threadpool or naive"):
        svc_config.Settings.from_env({"ONNX_SERVICE_HANDLER": "fast"})
    with pytest.raises(svc_config.ConfigError, match="64 hexadecimal digits"):
        svc_config.Settings.from_env({"ONNX_SERVICE_MODEL_SHA256": "abc"})
    with pytest.raises(svc_config.ConfigError, match="ONNX_SERVICE_ACCESS_LOG='maybe'"):
        svc_config.Settings.from_env({"ONNX_SERVICE_ACCESS_LOG": "maybe"})
    round_trip = svc_config.Settings.from_env(svc_config.Settings(port=1234, access_log=True).to_env())
    assert round_trip.port == 1234 and round_trip.access_log is True
