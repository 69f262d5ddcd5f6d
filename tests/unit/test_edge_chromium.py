"""labsupport.topics.web.chromium_available: notebook 09 skips its browser cells when it is False."""

from __future__ import annotations

import pytest

from labsupport.topics import web


def test_a_missing_browser_is_not_available(tmp_path):
    assert not web.chromium_available(str(tmp_path / "chromium"))


def test_a_file_that_cannot_be_run_is_not_available(tmp_path):
    browser = tmp_path / "chromium"
    browser.write_text("#!/bin/sh\n")
    browser.chmod(0o644)
    assert not web.chromium_available(str(browser))
    browser.chmod(0o755)
    assert web.chromium_available(str(browser))


def test_browser_classify_without_chromium_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="ONNX_LAB_CHROMIUM"):
        web.browser_classify(tmp_path / "model.onnx", [[0.0] * 64], executable=str(tmp_path / "chromium"))
