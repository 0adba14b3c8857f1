"""The suite's compile-time records: with the persistent plan cache on, a case records the compile of a
fresh function whose plan is loaded from it (`compile_warm_plan_s`, and the seconds of it spent making cuDNN
graphs: none on the reference executor) beside the cold and warm-kernel-cache compiles, and the report shows
the column; with the cache off the record is empty."""

import json

import pytest

from flame.bench import run_suite, select


@pytest.mark.parametrize("on", [True, False])
def test_warm_plan_cache_compile_is_recorded(on, tmp_path, monkeypatch):
    monkeypatch.setenv("FLAME_CACHE_SIZE", "" if on else "0")  # "": the default size
    run_suite(select("mlp_small_train"), quick=True, out=str(tmp_path), log=lambda *a: None, peers=[])
    (case,) = json.loads((tmp_path / "results.json").read_text())["cases"]
    f = case["flame"]
    assert f["status"] == "ok" and f["compile_cold_s"] > 0 and f["compile_warm_s"] > 0
    if on:
        assert f["compile_warm_plan_s"] > 0 and f["compile_warm_plan_cudnn_s"] == 0
    else:
        assert f["compile_warm_plan_s"] is None and f["compile_warm_plan_cudnn_s"] is None
    assert "compile warm plan s" in (tmp_path / "results.md").read_text()
